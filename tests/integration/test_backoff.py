"""Backoff by delivery count (``claim.backoff_factor``), the whole job: the dry run plans the
due entries and counts the rest, a run claims exactly the due ones (in-process and through a
real spark-submit), and Redis holds the entries not due as they were.

The schedule: from 10 min (min_idle_ms), doubled per delivery, at most 2,000 s; limit 5.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from redis import Redis

from tests.support.backlogs import DEAD
from tests.support.fault_tools import (
    GROUP,
    QUIET_SPARK_INFO,
    Key,
    finished,
    handed_over,
    job_args,
    report_rows,
    run_in_process,
    seed_kinds,
    spark_info_lines,
    spark_submit,
    write_control,
)
from tests.support.invariants import final_states, pel
from tests.support.servers import ON_NEWEST_TOO

pytestmark = pytest.mark.slow  # whole Spark runs and a spark-submit run

SCHEDULE = ("claim.min_idle_ms=600000", "claim.backoff_factor=2",
            "claim.backoff_max_ms=2000000")
# kind -> (entries per stream, delivery count, idle ms); the planned action ("" not due)
KINDS: dict[str, tuple[int, ...]] = {
    "ok": (6, 1, 3_600_000),              # waits 10 min
    "twice_due": (4, 2, 1_300_000),       # waits 20 min
    "twice_waiting": (4, 2, 900_000),     # due in 5 min
    "capped": (3, 3, 2_100_000),          # waits 40 min, capped at 2,000 s
    "thrice_waiting": (3, 3, 1_500_000),  # due in 500 s
    "poison": (3, 5, 700_000),            # its next delivery is over the limit: 10 min
    "fresh": (2, 1, 100_000),             # idle too little for any claim
}
PLANNED = {"ok": "would_reprocess", "twice_due": "would_reprocess",
           "capped": "would_reprocess", "poison": "would_dead_letter"}
DONE = {"ok": "reprocessed", "twice_due": "reprocessed", "capped": "reprocessed",
        "poison": "dead_lettered"}
WAITING = ("twice_waiting", "thrice_waiting")
STREAMS = ["b-a", "b-b{t}"]


def pel_rows(client: Redis) -> dict[Key, tuple[str, int]]:
    """Every PEL row of the streams: owner and delivery count."""
    return {(s, GROUP, i): (p.consumer, p.delivery_count)
            for s in STREAMS for i, p in pel(client, s, GROUP).items()}


def check_not_due_untouched(client: Redis, seeded: dict[Key, str],
                            before: dict[Key, tuple[str, int]]) -> None:
    """Entries not due (and those idle too little) are still the dead consumer's, with the
    counts they had; none was handed over."""
    now = pel_rows(client)
    handed = handed_over(client)
    for key, kind in seeded.items():
        if kind in (*WAITING, "fresh"):
            assert now[key] == before[key] == (DEAD, KINDS[kind][1]), (key, kind)
            assert handed[key] == 0, (key, kind)


def check_summary(summary: dict[str, Any], started_ms: int) -> None:
    """14 entries not due (7 per stream), the first due about 5 min after the seed."""
    assert summary["not_due"] == 7 * len(STREAMS)
    assert 290_000 <= summary["next_due_ms"] - started_ms <= 300_500
    assert summary["backoff"] == {"factor": 2.0, "max_ms": 2_000_000}
    assert sorted((u["stream"], u["not_due"]) for u in summary["units"]) == \
        [(s, 7) for s in sorted(STREAMS)]


@ON_NEWEST_TOO
def test_the_dry_run_plans_the_due_entries_and_the_run_claims_exactly_those(
        spark, server, tmp_path):
    """In-process (the suite's session retries tasks: the journaled one pass)."""
    client = server.client()
    seeded = seed_kinds(client, STREAMS, KINDS)
    started_ms = int(time.time() * 1000)
    write_control(server.url)
    before = pel_rows(client)
    plan = run_in_process(spark, [*job_args(server.url, tmp_path, STREAMS, *SCHEDULE,
                                            run_id="plan"), "--dry-run"])
    assert plan.code == 0, plan.stderr
    assert pel_rows(client) == before  # a dry run claims nothing
    planned = {(r["stream"], r["group"], r["id"]): r["action"]
               for r in report_rows(spark, tmp_path, "plan") or []}
    assert planned == {k: PLANNED[kind] for k, kind in seeded.items() if kind in PLANNED}
    check_summary(plan.summary, started_ms)

    result = run_in_process(spark, job_args(server.url, tmp_path, STREAMS, *SCHEDULE,
                                            run_id="run"))
    assert result.code == 0, result.stderr
    done = {(r["stream"], r["group"], r["id"]): r["action"]
            for r in report_rows(spark, tmp_path, "run") or []}
    assert done == {k: DONE[kind] for k, kind in seeded.items() if kind in DONE}
    check_summary(result.summary, started_ms)
    check_not_due_untouched(client, seeded, before)
    states = final_states(client, {k: v for k, v in seeded.items() if v in DONE})
    assert all(states[k] == ("dead_lettered" if seeded[k] == "poison" else "acked")
               for k in states), states


@pytest.mark.timeout(300)
def test_a_scheduled_run_through_spark_submit(redis_server, tmp_path: Path, spark):
    """A real spark-submit (local[2]: the one pass without retries): the summary line and
    the log's table show the entries not due; Redis holds them as they were. One server kind
    is enough here: how each kind answers the backoff claim is the in-process test's, on
    every server (ON_NEWEST_TOO). Without ``spark.log.level`` Spark logs at WARN under
    spark-submit (the job's own INFO lines stay): the quiet default of
    tests/integration/test_cli.py's ``test_spark_submit_logs_spark_s_info_when_asked``."""
    server = redis_server
    client = server.client()
    seeded = seed_kinds(client, STREAMS, KINDS)
    started_ms = int(time.time() * 1000)
    write_control(server.url)
    before = pel_rows(client)
    logs = tmp_path / "logs"
    result = finished(spark_submit(job_args(server.url, tmp_path, STREAMS, *SCHEDULE,
                                            run_id="submitted"), logs), logs, timeout_s=240)
    assert result.code == 0, result.stderr[-3000:]
    check_summary(result.summary, started_ms)
    assert result.summary["totals"]["reprocessed"] == 13 * len(STREAMS)
    assert result.summary["totals"]["dead_lettered"] == 3 * len(STREAMS)
    assert "not_due" in result.stderr and "next_due" in result.stderr
    assert "14 entries left pending, not due yet under the backoff schedule" in result.stderr
    assert "INFO recovery.driver.job: run " in result.stderr
    assert spark_info_lines(result.stderr) <= QUIET_SPARK_INFO, spark_info_lines(result.stderr)
    check_not_due_untouched(client, seeded, before)
    done = {(r["stream"], r["group"], r["id"]) for r in report_rows(spark, tmp_path,
                                                                     "submitted") or []}
    assert done == {k for k, kind in seeded.items() if kind in DONE}
