"""The metrics a run pushes to a real Prometheus Pushgateway (recovery.metrics.families,
recovery.report.after_run, recovery.metrics.push, recovery.metrics.recovery_run,
recovery.metrics.dead_letter_jobs, recovery.settings.metrics): off by default; names,
grouping keys and bounded series; the values pushed after a real run compared with Redis
itself (XPENDING, XLEN) and with the JSON summary; a push that fails (nobody listening,
refused credentials) leaves the run's outcome and exit code alone, with one WARNING line and
the summary's ``metrics`` entry."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession
from redis import Redis

from recovery.errors import ConfigError
from recovery.executor.histogram import DELIVERY_LABELS
from recovery.jobs.dead_letters import DeadLettersJob
from recovery.jobs.redrive import RedriveJob
from recovery.metrics.families import (
    LAST_SUCCESS,
    OTHER,
    PREFIX,
    RunFacts,
    run_registry,
    success_registry,
)
from recovery.metrics.push import push_metrics, series_count
from recovery.metrics.recovery_run import push_recovery_metrics
from recovery.report.summary import RunSummary
from recovery.rows import AfterRun, HealthRow, UnitCounts
from recovery.settings.metrics import MetricsSettings
from recovery.settings.model import load_settings
from recovery.testing.local_redis import LocalServer, free_port
from tests.support.backlogs import seed
from tests.support.fault_tools import (
    job_args,
    json_summary,
    run_in_process,
)
from tests.support.invariants import pel
from tests.support.pushgateway import LocalPushgateway, pushed

PASSWORD = "Quokka-5e1d-pushpass-2231"
HANDLER = "handler.path=tests.support.handlers:verify_or_fail"  # fails the "fail" kind
ACTIONS = ("reprocessed", "dead_lettered", "failed")


@pytest.fixture(scope="module")
def pushgateway() -> Iterator[LocalPushgateway]:
    with LocalPushgateway() as gateway:
        yield gateway


@pytest.fixture(scope="module")
def guarded_pushgateway() -> Iterator[LocalPushgateway]:
    with LocalPushgateway(users={"pusher": PASSWORD}) as gateway:
        yield gateway


def facts(status: str = "ok", units: int = 2, pending: int = 3) -> RunFacts:
    """A run's facts over `units` streams with one group each, `pending` entries in unit 0
    and one fewer in each next unit (at least 0)."""
    health = [HealthRow(f"s{i}", "g", length=0, lag=i if i % 2 else None, pending=0,
                        oldest_idle_ms=1000 * (i + 1), dead_letter_length=i)
              for i in range(units)]
    rows = [UnitCounts(f"s{i}", "g", {"reprocessed": i, "dead_lettered": 1, "failed": 0},
                       total=i + 1) for i in range(units)]
    after = AfterRun({(f"s{i}", "g"): max(pending - i, 0) for i in range(units)},
                     {f"s{i}": 10 + i for i in range(units)})
    return RunFacts(status, 0 if status != "failed" else 1, 1_700_000_000.0, 12.5,
                    totals={"reprocessed": sum(range(units)), "dead_lettered": units,
                            "failed": 0},
                    not_due=4, skipped=1, units=rows, health=health, after=after)


def settings_for(url: str, **extra: object) -> MetricsSettings:
    return MetricsSettings(pushgateway_url=url, **extra)  # type: ignore[arg-type]


def labels(**pairs: str) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(pairs.items()))


def test_metrics_are_off_by_default(tmp_path: Path) -> None:
    """No [metrics] section: no push, no read, and the summary's ``metrics`` is null."""
    settings = load_settings(None, ["streams.keys=a"])
    summary = RunSummary("r1")
    assert settings.metrics.pushgateway_url is None
    assert push_recovery_metrics(settings, summary, 0, 0.0) is None
    assert '"metrics":null' in summary.json_line()


def test_a_password_in_the_url_is_refused_without_echoing_it() -> None:
    with pytest.raises(ConfigError) as refused:
        load_settings(None, ["streams.keys=a",
                             f"metrics.pushgateway_url=http://pusher:{PASSWORD}@h:9091"])
    assert "metrics.pushgateway_url" in str(refused.value)
    assert PASSWORD not in str(refused.value)


def test_the_password_file_is_read_and_masked(tmp_path: Path) -> None:
    secret = tmp_path / "pw"
    secret.write_text(PASSWORD + "\n")
    metrics = load_settings(None, ["streams.keys=a", "metrics.pushgateway_url=http://h:9091",
                                   "metrics.username=pusher",
                                   f"metrics.password_file={secret}"]).metrics
    assert metrics.password is not None and metrics.password.get_secret_value() == PASSWORD
    assert PASSWORD not in repr(metrics)


@pytest.mark.slow
def test_series_stay_bounded_at_100000_streams() -> None:
    """max_units units of their own plus one (other) unit that sums the rest: the pending
    series' sum is unchanged and the count of units aggregated is said."""
    run = facts(units=100_000, pending=150_000)
    registry = run_registry(run, max_units=10)
    samples: dict[str, list[Any]] = {s.name: [] for f in registry.collect() for s in f.samples}
    for family in registry.collect():
        for sample in family.samples:
            samples[sample.name].append(sample)
    pending = samples[PREFIX + "pending_entries"]
    assert len(pending) == 11
    assert sum(s.value for s in pending) == sum(run.after.pending.values())
    own = [s.labels["stream"] for s in pending if s.labels["stream"] != OTHER]
    assert own == [f"s{i}" for i in range(10)]  # those with the most pending
    assert [s.value for s in samples[PREFIX + "run_units_aggregated"]] == [99_990]
    other = {s.labels["stream"] for s in samples[PREFIX + "dead_letter_entries"]}
    assert OTHER in other and len(other) == 11
    assert series_count(registry) < 200
    assert all("id" not in s.labels for ss in samples.values() for s in ss)


def test_a_push_lands_in_its_own_group(pushgateway: LocalPushgateway) -> None:
    """Two kinds (a run and a dry run) and two instances never overwrite each other; the
    next push of a group replaces it whole (a unit gone leaves no stale series)."""
    metrics = settings_for(pushgateway.url, instance="a")
    assert push_metrics(metrics, "recover", run_registry(facts(units=3), 100),
                        success_registry(1_700_000_100.0))["pushed"]
    assert push_metrics(metrics, "recover_dry_run", run_registry(facts(units=2), 100),
                        None)["pushed"]
    assert push_metrics(settings_for(pushgateway.url, instance="b"), "recover",
                        run_registry(facts(units=1), 100), None)["pushed"]
    pending = pushgateway.series(PREFIX + "pending_entries")
    key = {"job": "redis_stream_recovery", "instance": "a", "kind": "recover"}
    assert pending[labels(**key, stream="s2", group="g")] == 1
    assert labels(job="redis_stream_recovery", instance="a", kind="recover_dry_run",
                  stream="s1", group="g") in pending
    assert labels(job="redis_stream_recovery", instance="b", kind="recover", stream="s0",
                  group="g") in pending
    lag = pushgateway.series(PREFIX + "lag_entries")  # absent where the server has none
    assert labels(**key, stream="s1", group="g") in lag
    assert labels(**key, stream="s0", group="g") not in lag
    push_metrics(metrics, "recover", run_registry(facts(units=1), 100), None)
    pending = pushgateway.series(PREFIX + "pending_entries")
    assert labels(**key, stream="s2", group="g") not in pending
    assert labels(**key, stream="s0", group="g") in pending


def test_a_failed_run_keeps_the_last_success(pushgateway: LocalPushgateway) -> None:
    metrics = settings_for(pushgateway.url, instance="fails")
    push_metrics(metrics, "recover", run_registry(facts(), 100), success_registry(1_700.0))
    push_metrics(metrics, "recover", run_registry(facts("failed"), 100), None)
    key = {"job": "redis_stream_recovery", "instance": "fails", "kind": "recover"}
    last = {k: v for k, v in pushgateway.series(LAST_SUCCESS).items() if ("instance", "fails") in k}
    assert last == {labels(**key, outcome="success"): 1_700.0}
    status = pushgateway.series(PREFIX + "run_status")
    assert status[labels(**key, status="failed")] == 1
    assert status[labels(**key, status="ok")] == 0
    assert pushgateway.series(PREFIX + "run_exit_code")[labels(**key)] == 1


def test_nobody_listening_is_one_warning(caplog: pytest.LogCaptureFixture) -> None:
    metrics = settings_for(f"http://127.0.0.1:{free_port()}", timeout_s=2)
    with caplog.at_level(logging.INFO, logger="recovery"):
        entry = push_metrics(metrics, "recover", run_registry(facts(), 100), None)
    assert entry["pushed"] is False and "refused" in entry["error"].lower()
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and "metrics: push to" in warnings[0].getMessage()


def test_refused_credentials_are_one_warning_and_never_logged(
        guarded_pushgateway: LocalPushgateway, caplog: pytest.LogCaptureFixture) -> None:
    wrong = settings_for(guarded_pushgateway.url, username="pusher", password="wrong-one")
    with caplog.at_level(logging.INFO, logger="recovery"):
        entry = push_metrics(wrong, "recover", run_registry(facts(), 100), None)
    assert entry["pushed"] is False and "401" in entry["error"]
    assert len([r for r in caplog.records if r.levelno >= logging.WARNING]) == 1
    right = settings_for(guarded_pushgateway.url, username="pusher", password=PASSWORD)
    with caplog.at_level(logging.INFO, logger="recovery"):
        assert push_metrics(right, "recover", run_registry(facts(), 100), None)["pushed"]
    assert guarded_pushgateway.series(PREFIX + "run_status")
    assert PASSWORD not in caplog.text and "wrong-one" not in caplog.text


@pytest.mark.slow
def test_a_run_pushes_what_redis_shows(spark: SparkSession, redis_server: LocalServer,
                                       tmp_path: Path) -> None:
    """After a real run: pending per group equals XPENDING's count (after the run, not the
    count before it), the dead-letter length XLEN's, entries by action the summary's."""
    client: Redis = redis_server.client()
    streams = ["met-a", "met-b"]
    seed(client, streams, ["g1"])
    before = len(pel(client, "met-a", "g1"))
    with LocalPushgateway() as gateway:
        result = run_in_process(spark, job_args(redis_server.url, tmp_path, streams, HANDLER,
                                                f"metrics.pushgateway_url={gateway.url}"))
        assert result.code == 0, result.stderr[-3000:]
        summary = result.summary
        assert summary["metrics"]["pushed"] is True, summary["metrics"]
        assert summary["metrics"]["pending"] == "after the run"
        pending = pushed(gateway, PREFIX + "pending_entries")
        dead = pushed(gateway, PREFIX + "dead_letter_entries")
        run_entries = pushed(gateway, PREFIX + "run_entries")
        group_entries = pushed(gateway, PREFIX + "group_entries")
        status = pushed(gateway, PREFIX + "run_status")
        last_success = pushed(gateway, LAST_SUCCESS)
    for stream in streams:
        now = client.xpending(stream, "g1")["pending"]
        assert pending[f"group=g1,stream={stream}"] == now == 20 != before
        assert dead[f"stream={stream}"] == client.xlen("{" + stream + "}:dlq") > 0
    assert run_entries == {f"action={a}": n for a, n in summary["totals"].items()}
    assert group_entries == {f"action={a},group={u['group']},stream={u['stream']}": u[a]
                             for u in summary["units"] for a in summary["totals"]}
    assert status["status=ok"] == 1 and status["status=failed"] == 0
    assert list(last_success) == ["outcome=success"]


@pytest.mark.slow
def test_a_dead_pushgateway_changes_nothing(spark: SparkSession, redis_server: LocalServer,
                                            tmp_path: Path,
                                            caplog: pytest.LogCaptureFixture) -> None:
    """The same run with nobody at the Pushgateway's address: exit 0, the same Redis
    outcome, one WARNING line and the summary's ``metrics`` entry saying so."""
    client: Redis = redis_server.client()
    seed(client, ["met-dead"], ["g1"])
    url = f"http://127.0.0.1:{free_port()}"
    with caplog.at_level(logging.INFO, logger="recovery"):
        result = run_in_process(spark, job_args(redis_server.url, tmp_path, ["met-dead"],
                                                HANDLER, f"metrics.pushgateway_url={url}",
                                                "metrics.timeout_s=2"))
    assert result.code == 0, result.stderr[-3000:]
    assert result.summary["status"] == "ok" and result.summary["exit_code"] == 0
    metrics = result.summary["metrics"]
    assert metrics["pushed"] is False and metrics["url"] == url and metrics["error"]
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING
                and r.name.startswith("recovery.metrics")]  # (the job warns of its failed)
    assert len(warnings) == 1 and "metrics: push to" in warnings[0], warnings
    totals = result.summary["totals"]
    assert totals["reprocessed"] == 120 and totals["dead_lettered"] == 18
    assert client.xlen("{met-dead}:dlq") == 18
    assert client.xpending("met-dead", "g1")["pending"] == 20  # the failed and the fresh


@pytest.mark.slow
def test_the_dead_letter_jobs_push_to_groups_of_their_own(
        spark: SparkSession, redis_server: LocalServer, tmp_path: Path) -> None:
    """A recovery run, a dead-letter read and a redrive push to one Pushgateway, each to its
    own group (none erases another's); the lengths they push are XLEN's at their end, the
    counts their summaries'."""
    client: Redis = redis_server.client()
    seed(client, ["met-dl"], ["g1"])
    dlq = "{met-dl}:dlq"
    with LocalPushgateway() as gateway:
        sets = [f"redis.url={redis_server.url}", "streams.keys=met-dl",
                f"report.path={tmp_path}", f"metrics.pushgateway_url={gateway.url}"]
        args = [a for s in sets for a in ("--set", s)]
        recovered = run_in_process(spark, job_args(redis_server.url, tmp_path, ["met-dl"],
                                                   HANDLER, sets[-1]))
        assert recovered.code == 0 and client.xlen(dlq) == 18
        code, read = json_summary(lambda: DeadLettersJob(lambda _: spark).main(args))
        assert code == 0 and read["metrics"]["pushed"] is True, read["metrics"]
        assert pushed(gateway, PREFIX + "dead_letter_entries", "dead_letters") == {
            "stream=met-dl": 18}
        assert read["totals"]["dead_letters"] == 18
        assert pushed(gateway, PREFIX + "run_entries", "dead_letters") == {"action=read": 18}
        ages = pushed(gateway, PREFIX + "dead_letter_oldest_age_seconds", "dead_letters")
        assert list(ages) == ["stream=met-dl"] and ages["stream=met-dl"] >= 0
        # With retention: the length pushed is the one its trim left (XLEN), not the read's.
        code, trimmed = json_summary(lambda: DeadLettersJob(lambda _: spark).main(
            [*args, "--set", "dead_letters.max_length=15"]))
        assert code == 0 and trimmed["retention"]["trimmed"] == 3 and client.xlen(dlq) == 15
        assert pushed(gateway, PREFIX + "dead_letter_entries", "dead_letters") == {
            "stream=met-dl": 15}
        code, redriven = json_summary(lambda: RedriveJob().main(args))
        assert code == 0 and redriven["metrics"]["pushed"] is True, redriven["metrics"]
        assert redriven["totals"]["redriven"] == 15 and client.xlen(dlq) == 0
        assert pushed(gateway, PREFIX + "run_entries", "redrive") == {
            f"action={a}": n for a, n in redriven["totals"].items()}
        assert pushed(gateway, PREFIX + "dead_letter_entries", "redrive") == {"stream=met-dl": 0}
        for kind in ("recover", "dead_letters", "redrive"):  # each group still there
            assert list(pushed(gateway, LAST_SUCCESS, kind)) == ["outcome=success"]
            assert pushed(gateway, PREFIX + "run_status", kind)["status=ok"] == 1


@pytest.mark.slow
def test_a_run_pushes_with_the_password_from_the_environment(
        spark: SparkSession, redis_server: LocalServer, guarded_pushgateway: LocalPushgateway,
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
        ) -> None:
    """Basic auth with ``RECOVERY_METRICS__PASSWORD`` (the job's CLI in this process, on the
    suite's session): the push is accepted, and the password appears in neither the
    arguments nor the job's output (stdout, stderr, log). The environment reaches a
    spark-submit driver as it reaches this process; that a secret from the environment
    leaves no trace in any output of a real spark-submit (Spark's logs, the event log,
    every process's command line) is tests/integration/test_secrets.py's
    ``test_a_full_run_leaks_the_password_nowhere``."""
    caplog.set_level(logging.INFO, logger="recovery")
    client: Redis = redis_server.client()
    seed(client, ["met-submit"], ["g1"])
    monkeypatch.setenv("RECOVERY_METRICS__PASSWORD", PASSWORD)
    args = job_args(redis_server.url, tmp_path / "reports", ["met-submit"], HANDLER,
                    f"metrics.pushgateway_url={guarded_pushgateway.url}",
                    "metrics.username=pusher", "metrics.instance=submitted")
    result = run_in_process(spark, args)
    assert result.code == 0, result.stderr[-3000:]
    assert result.summary["metrics"]["pushed"] is True, result.summary["metrics"]
    outputs = (result.stderr, json.dumps(result.summary), caplog.text, " ".join(args))
    assert not [text for text in outputs if PASSWORD in text]
    pending = guarded_pushgateway.series(PREFIX + "pending_entries")
    key = labels(job="redis_stream_recovery", instance="submitted", kind="recover",
                 stream="met-submit", group="g1")
    assert pending[key] == client.xpending("met-submit", "g1")["pending"] == 20


@pytest.mark.slow
def test_a_run_that_fails_pushes_failed_and_no_success(
        spark: SparkSession, redis_server: LocalServer, tmp_path: Path) -> None:
    """A run over its failure threshold (exit 1) still pushes: status failed, exit code 1,
    its entries by action, and no last success; the exit code stays the run's."""
    client: Redis = redis_server.client()
    seed(client, ["met-fail"], ["g1"])
    with LocalPushgateway() as gateway:
        result = run_in_process(spark, job_args(redis_server.url, tmp_path, ["met-fail"],
                                                HANDLER, "handler.max_failed_ratio=0.01",
                                                f"metrics.pushgateway_url={gateway.url}"))
        assert result.code == 1 and result.summary["status"] == "failed", result.stderr[-2000:]
        assert result.summary["metrics"]["pushed"] is True
        status = pushed(gateway, PREFIX + "run_status")
        assert status["status=failed"] == 1 and status["status=ok"] == 0
        assert pushed(gateway, PREFIX + "run_exit_code") == {"": 1}
        assert pushed(gateway, PREFIX + "run_entries")["action=failed"] == 10
        assert pushed(gateway, LAST_SUCCESS) == {}


def samples_of(registry: Any, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    """`name`'s samples in `registry`: sorted label pairs -> value."""
    return {tuple(sorted(s.labels.items())): s.value for f in registry.collect()
            for s in f.samples if s.name == PREFIX + name}


def test_delivery_buckets_and_job_consumers_stay_bounded() -> None:
    """The PEL's delivery-count buckets and the job's consumers left behind, per unit of its
    own, summed into the (other) unit for the rest; bucket labels are the histogram's."""
    run = facts(units=5, pending=10)
    run = replace(run, health=[replace(h, deliveries=(("1", 10 - i), ("6-10", i)))
                               for i, h in enumerate(run.health)])
    run.after.job_consumers.update({(f"s{i}", "g"): 1 for i in range(5)})
    run.after.job_consumer_entries.update({(f"s{i}", "g"): i for i in range(5)})
    registry = run_registry(run, max_units=2)
    buckets = samples_of(registry, "pel_delivery_entries")
    assert buckets[labels(stream="s0", group="g", bucket="1")] == 10
    assert buckets[labels(stream=OTHER, group=OTHER, bucket="1")] == 8 + 7 + 6
    assert buckets[labels(stream=OTHER, group=OTHER, bucket="6-10")] == 2 + 3 + 4
    assert {dict(k)["bucket"] for k in buckets} <= set(DELIVERY_LABELS) | {">100"}
    assert len({dict(k)["stream"] for k in buckets}) == 3
    assert samples_of(registry, "job_consumers")[labels(stream=OTHER, group=OTHER)] == 3
    held = samples_of(registry, "job_consumer_pending_entries")
    assert held == {labels(stream="s0", group="g"): 0, labels(stream="s1", group="g"): 1,
                    labels(stream=OTHER, group=OTHER): 2 + 3 + 4}


def test_a_group_with_nothing_pending_shows_zero_and_ages_come_from_after() -> None:
    """A group the run found with nothing pending: pending 0 and oldest idle 0 (not absent:
    a dashboard shows 0, not the last value); dead letters' ages read after the run."""
    run = RunFacts("ok", 0, 0.0, 1.0, health=[
        HealthRow("quiet", "g", length=0, lag=0, pending=0, dead_letter_length=0)],
        after=AfterRun({("quiet", "g"): 0}, {"quiet": 3}, {"quiet": 42.5},
                       {("quiet", "g"): 0}, {("quiet", "g"): 0}))
    registry = run_registry(run, max_units=10)
    unit = labels(stream="quiet", group="g")
    assert samples_of(registry, "pending_entries") == {unit: 0}
    assert samples_of(registry, "oldest_idle_seconds") == {unit: 0}
    assert samples_of(registry, "pel_delivery_entries") == {}
    assert samples_of(registry, "dead_letter_oldest_age_seconds") == {
        labels(stream="quiet"): 42.5}
    assert samples_of(registry, "job_consumers") == {unit: 0}
