"""The state right after a run in its summary (recovery.report.after_run): ``health`` is
the group health as found before the run, ``health_after`` and each unit's ``pending_after``
what Redis holds once it is done, checked against XPENDING and XLEN; a dry run changes
nothing and reads nothing after."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from recovery.testing.backlog import add_entries, create_group, deliver, make_stuck
from recovery.testing.local_redis import LocalServer
from tests.support.fault_tools import GROUP, job_args, run_in_process

pytestmark = pytest.mark.slow  # Spark jobs
HOUR_MS = 3_600_000


def seed(server: LocalServer) -> list[str]:
    """12 stuck entries of `orders`: 3 the example handler refuses (a ``poison`` field), 2
    delivered 9 times (over claim.max_deliveries 5), the rest fine."""
    client = server.client()
    create_group(client, "orders", GROUP)
    ids = add_entries(client, "orders", 12,
                      lambda i: {"n": str(i), **({"poison": "1"} if 2 <= i < 5 else {})})
    deliver(client, "orders", GROUP, "crashed", len(ids))
    make_stuck(client, "orders", GROUP, "crashed", ids, HOUR_MS)
    make_stuck(client, "orders", GROUP, "crashed", ids[:2], HOUR_MS, delivery_count=9)
    return ids


def test_the_summary_tells_the_state_before_and_after(spark: SparkSession,
                                                      redis_server: LocalServer,
                                                      tmp_path: Path) -> None:
    seed(redis_server)
    client = redis_server.client()
    args = job_args(redis_server.url, tmp_path, ["orders"],
                    "handler.path=recovery.handlers:example_handler")
    dry = run_in_process(spark, [*args, "--dry-run"])
    assert dry.code == 0, dry.stderr
    assert dry.summary["health_after"] is None  # nothing changed, nothing read
    assert client.xpending("orders", GROUP)["pending"] == 12

    result = run_in_process(spark, args)
    assert result.code == 0, result.stderr
    summary = result.summary
    assert summary["totals"]["dead_lettered"] == 2 and summary["totals"]["failed"] == 3
    assert summary["health"]["pending"] == 12  # as found before the run
    pending_now = client.xpending("orders", GROUP)["pending"]
    assert pending_now == 3  # the refused ones, for the next run
    assert summary["health_after"] == {"units": 1, "pending": pending_now,
                                       "dead_letter_length": client.xlen("{orders}:dlq")}
    assert summary["health_after"]["dead_letter_length"] == 2
    [unit] = summary["units"]
    assert unit["pending_after"] == pending_now
