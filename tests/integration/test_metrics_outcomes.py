"""What the metrics say when something goes wrong (issue 61): a Pushgateway that answers
one byte at a time never holds the job past ``metrics.timeout_s`` (recovery.metrics.push);
a run that never read Redis keeps the scheduled runs' per-stream series; a selection that
matches nothing is status ``empty`` with ``selected_units`` 0. Real Pushgateway, real Redis,
a real dripping TCP server."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from redis import Redis

from recovery.metrics.families import PREFIX, RunFacts, run_registry
from recovery.metrics.push import push_metrics
from recovery.settings.metrics import MetricsSettings
from recovery.testing.local_redis import LocalServer, free_port
from tests.support.backlogs import seed
from tests.support.dripping import DrippingServer
from tests.support.fault_tools import finished, job_args, run_in_process, spark_submit
from tests.support.pushgateway import LocalPushgateway, pushed

HANDLER = "handler.path=tests.support.handlers:verify_or_fail"
TIMEOUT_S = 2.0
SLACK_S = 1.5


def test_a_dripping_gateway_is_cut_at_the_timeout(caplog: pytest.LogCaptureFixture) -> None:
    """A byte every 1.5 s keeps every socket operation under a 2 s timeout: only a deadline
    on the whole push ends it, one WARNING and the entry's error saying so."""
    with DrippingServer(interval_s=1.5) as gateway, \
            caplog.at_level(logging.INFO, logger="recovery"):
        started = time.monotonic()
        entry = push_metrics(MetricsSettings(pushgateway_url=gateway.url,  # type: ignore[arg-type]
                                             timeout_s=TIMEOUT_S), "recover",
                             run_registry(RunFacts("ok", 0, 0.0, 1.0), 100), None)
        took = time.monotonic() - started
        sent = gateway.sent
    assert sent >= 1 and gateway.accepted_at, "the gateway never dripped"
    assert took < TIMEOUT_S + SLACK_S, took
    assert entry["pushed"] is False and "TimeoutError" in entry["error"], entry
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and "timeout_s=2" in warnings[0], warnings


@pytest.mark.slow
def test_a_run_with_a_dripping_gateway_ends_and_prints_its_json(
        spark: SparkSession, redis_server: LocalServer, tmp_path: Path,
        caplog: pytest.LogCaptureFixture) -> None:
    """A real run whose push drips: it returns within the timeout of the push's start, exit
    0, its work in Redis, and the JSON line (stdout's last, parsed by run_in_process) says
    the push timed out."""
    client: Redis = redis_server.client()
    seed(client, ["met-drip"], ["g1"])
    with DrippingServer(interval_s=1.5) as gateway, \
            caplog.at_level(logging.INFO, logger="recovery"):
        result = run_in_process(spark, job_args(
            redis_server.url, tmp_path, ["met-drip"], HANDLER,
            f"metrics.pushgateway_url={gateway.url}", f"metrics.timeout_s={TIMEOUT_S}"))
        ended = time.monotonic()
        sent = gateway.sent
    assert sent >= 1 and len(gateway.accepted_at) == 1, "the gateway never dripped"
    assert ended - gateway.accepted_at[0] < TIMEOUT_S + SLACK_S, ended - gateway.accepted_at[0]
    assert result.code == 0 and result.summary["status"] == "ok", result.stderr[-2000:]
    metrics = result.summary["metrics"]
    assert metrics["pushed"] is False and "TimeoutError" in metrics["error"], metrics
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING
                and r.name.startswith("recovery.metrics")]
    assert len(warnings) == 1, warnings
    assert client.xlen("{met-drip}:dlq") == 18  # the run's work stands


def selection_args(url: str, reports: Path, *sets: str) -> list[str]:
    """Arguments of a real run (the recording handler) with the selection in `sets`."""
    every = [f"redis.url={url}", f"report.path={reports}", "claim.max_deliveries=5",
             "handler.path=tests.support.handlers:recording", *sets]
    return [a for s in every for a in ("--set", s)]


@pytest.mark.slow
def test_a_selection_that_matches_nothing_is_empty(
        spark: SparkSession, redis_server: LocalServer, tmp_path: Path) -> None:
    """``streams.match=order:*`` over ``orders:*`` streams: status empty (not ok), exit 0 by
    default, ``selected_units`` 0 in the summary and pushed, ``run_status{status="empty"}``
    1; nothing claimed. With ``streams.fail_when_empty``: exit 1."""
    client: Redis = redis_server.client()
    seed(client, ["orders:eu"], ["g1"])
    before = client.xpending("orders:eu", "g1")["pending"]
    with LocalPushgateway() as gateway:
        result = run_in_process(spark, selection_args(
            redis_server.url, tmp_path, "streams.match=order:*",
            f"metrics.pushgateway_url={gateway.url}"))
        assert result.code == 0, result.stderr[-2000:]
        assert result.summary["status"] == "empty", result.summary
        assert result.summary["selected_units"] == 0
        assert pushed(gateway, PREFIX + "selected_units") == {"": 0}
        status = pushed(gateway, PREFIX + "run_status")
        assert status["status=empty"] == 1 and status["status=ok"] == 0, status
        failing = run_in_process(spark, selection_args(
            redis_server.url, tmp_path, "streams.match=order:*", "streams.fail_when_empty=true",
            f"metrics.pushgateway_url={gateway.url}"))
        assert failing.code == 1 and failing.summary["status"] == "failed", failing.summary
        assert "streams.fail_when_empty" in failing.error_lines()[0]
        assert pushed(gateway, PREFIX + "selected_units") == {"": 0}
    assert client.xpending("orders:eu", "g1")["pending"] == before  # nothing claimed


@pytest.mark.slow
def test_a_non_stream_key_beside_a_stream_stays_partial(
        spark: SparkSession, redis_server: LocalServer, tmp_path: Path) -> None:
    """The pattern matches a stream and a hash: partial (a key skipped), one unit selected;
    a pattern that matches only the hash: empty (nothing selected beats a skip)."""
    client: Redis = redis_server.client()
    seed(client, ["mix:s"], ["g1"])
    client.hset("mix:h", "f", "v")
    both = run_in_process(spark, selection_args(redis_server.url, tmp_path, "streams.match=mix:*"))
    assert both.code == 0 and both.summary["status"] == "partial", both.stderr[-2000:]
    assert both.summary["selected_units"] == 1
    only_hash = run_in_process(spark, selection_args(redis_server.url, tmp_path,
                                                     "streams.match=mix:h*"))
    assert only_hash.code == 0 and only_hash.summary["status"] == "empty", only_hash.summary
    assert only_hash.summary["selected_units"] == 0 and only_hash.summary["skipped"]


def per_stream(gateway: LocalPushgateway) -> dict[str, dict[str, float]]:
    """The scheduled group's per-stream series (kind recover) now on the gateway."""
    return {name: pushed(gateway, PREFIX + name) for name in
            ("pending_entries", "oldest_idle_seconds", "job_consumers")}


@pytest.mark.slow
def test_runs_that_never_read_redis_keep_the_last_per_stream_series(
        spark: SparkSession, redis_server: LocalServer, tmp_path: Path) -> None:
    """After a scheduled run: a refused run (a handler that does not import, exit 2), a run
    with Redis unreachable (exit 1) and an ``apply`` of a plan that is not there (exit 2)
    leave the kind="recover" group as the last run that read Redis pushed it; each pushes
    its attempt (exit code; redis_up 0 only where Redis could not be reached) instead. A
    Pushgateway that held these series before must still hold them (checked)."""
    client: Redis = redis_server.client()
    seed(client, ["met-keep"], ["g1"])
    with LocalPushgateway() as gateway:
        url = f"metrics.pushgateway_url={gateway.url}"
        good = run_in_process(spark, job_args(redis_server.url, tmp_path, ["met-keep"],
                                               HANDLER, url))
        assert good.code == 0, good.stderr[-2000:]
        kept = per_stream(gateway)
        assert kept["pending_entries"] == {"group=g1,stream=met-keep": 20}, kept
        assert pushed(gateway, PREFIX + "redis_up") == {"outcome=attempt": 1}
        refused = run_in_process(None, job_args(redis_server.url, tmp_path, ["met-keep"],
                                                url, "handler.path=no_such_module:handle"))
        assert refused.code == 2, refused.stderr[-2000:]
        assert per_stream(gateway) == kept
        assert pushed(gateway, PREFIX + "last_attempt_exit_code") == {"outcome=attempt": 2}
        assert pushed(gateway, PREFIX + "redis_up") == {"outcome=attempt": 1}  # not known
        unreachable = run_in_process(None, job_args(f"redis://127.0.0.1:{free_port()}",
                                                    tmp_path, ["met-keep"], HANDLER, url))
        assert unreachable.code == 1, unreachable.stderr[-2000:]
        assert per_stream(gateway) == kept
        assert pushed(gateway, PREFIX + "redis_up") == {"outcome=attempt": 0}
        assert pushed(gateway, PREFIX + "last_attempt_exit_code") == {"outcome=attempt": 1}
        status = pushed(gateway, PREFIX + "run_status")
        assert status["status=ok"] == 1, status  # the last run that read Redis
        applied = run_in_process(None, [*job_args(redis_server.url, tmp_path, ["met-keep"],
                                                  HANDLER, url),
                                        "--plan", str(tmp_path / "nonexistent")])
        assert applied.code == 2, applied.stderr[-2000:]
        assert per_stream(gateway) == kept
        assert pushed(gateway, PREFIX + "last_attempt_exit_code", "recover_apply") == {
            "outcome=attempt": 2}
        assert pushed(gateway, PREFIX + "pending_entries", "recover_apply") == {}


@pytest.mark.slow
def test_spark_submit_with_a_dripping_gateway_exits_with_its_json(
        redis_server: LocalServer, tmp_path: Path) -> None:
    """The issue's case under spark-submit: the gateway drips for a minute, the job ends a
    few seconds (the JVM's shutdown) after the push began, exit 0, the JSON line last."""
    client: Redis = redis_server.client()
    seed(client, ["met-drip-submit"], ["g1"])
    with DrippingServer(interval_s=1.5, give_up_s=60) as gateway:
        proc = spark_submit(job_args(redis_server.url, tmp_path / "reports", ["met-drip-submit"],
                                     HANDLER, f"metrics.pushgateway_url={gateway.url}",
                                     f"metrics.timeout_s={TIMEOUT_S}"), tmp_path / "logs")
        result = finished(proc, tmp_path / "logs", timeout_s=240)
        ended = time.monotonic()
        sent = gateway.sent
    assert sent >= 1, "the gateway never dripped"
    # (before the fix: the drip's whole 57 s for each of the three groups' pushes)
    assert ended - gateway.accepted_at[0] < TIMEOUT_S + 15, ended - gateway.accepted_at[0]
    assert result.code == 0, result.stderr[-3000:]
    assert "TimeoutError" in result.summary["metrics"]["error"], result.summary["metrics"]
