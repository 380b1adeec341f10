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

from recovery.metrics.families import RunFacts, run_registry
from recovery.metrics.push import push_metrics
from recovery.settings.metrics import MetricsSettings
from recovery.testing.local_redis import LocalServer
from tests.support.backlogs import seed
from tests.support.dripping import DrippingServer
from tests.support.fault_tools import job_args, run_in_process

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
