"""Two runs at once (spark-submit and in-process, every claim path): no entry is handled or
dead-lettered twice.

Every fault here is proven to have happened, or the test fails; after each, Redis itself is
checked: every seeded entry is exactly one of acked, in its dead-letter stream exactly once,
still pending, or deleted upstream; and the reports account for what happened.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from tests.support.backlogs import DEAD
from tests.support.fault_checks import (
    SMALL_BATCHES,
)
from tests.support.fault_tools import (
    BACKOFF,
    SPLIT,
    WAITING_KIND,
    finished,
    handed_over,
    job_args,
    job_owned,
    owned_by,
    planned,
    report_rows,
    rows_by_key,
    run_in_process,
    seed_kinds,
    wait_until,
    write_control,
)
from tests.support.invariants import final_states

pytestmark = pytest.mark.slow  # kills, restarts and spark-submit runs


# Every path on Redis 7.0; Redis 6.2 and Valkey once each. No entry is deleted here, so
# the servers' claims differ in reply shapes only (the per-server tests cover those); the
# race itself is decided by the same scripts and XCLAIM guards on every server.
@pytest.mark.parametrize(("path", "redis_version_server", "schedule"),
                         [("materialised", "redis", ()), ("one-pass", "redis", ()),
                          ("journaled", "redis", ()), ("journaled", "redis", BACKOFF),
                          ("one-pass", "redis62", BACKOFF), ("plan", "redis", ()),
                          ("plan", "valkey", ()), ("journaled-split", "redis", ())],
                         ids=["materialised-redis", "one-pass-redis", "journaled-redis",
                              "journaled-redis-backoff", "one-pass-redis62-backoff",
                              "plan-redis", "plan-valkey", "journaled-split-redis"],
                         indirect=["redis_version_server"])
def test_two_runs_at_once_never_handle_or_dead_letter_an_entry_twice(
        spark, redis_version_server, tmp_path, small_batches, submit, caplog, path, schedule):
    """Run A (spark-submit) hands over slowly while run B (in-process) claims.

    materialised (local[2,2], no claim journal: A's tasks may be retried): A claims
    everything first; once its claims are older than min_idle_ms, B claims what A has not
    leased yet. Only the lease renewed before each handler call keeps A from handing those
    entries over as well. one-pass (local[2]) and journaled (local[2,2] with the journal):
    A claims 20 entries at a time and hands each step over at once; B claims what A has not
    reached, and A's later steps must leave B's entries alone. Under a backoff schedule
    (both runs), B's claims make its entries not due for A (delivered twice), and entries
    not due for either run stay with their owner. plan: as journaled, both runs applying
    the same dry run's plan (claims by ID, XCLAIM's min-idle guard). journaled-split: as
    journaled, run B splitting each stream over two parts (a shared cursor).
    """
    one_pass = path != "materialised"
    client = redis_version_server.client()
    streams = ["c-a", "c-b"]
    kinds = {"ok": (40, 1), "poison": (6, 9), "fail_at_limit": (4, 4),
             **(WAITING_KIND if schedule else {})}
    seeded = seed_kinds(client, streams, kinds)
    write_control(redis_version_server.url, delay_s=0.5)  # slow until B has claimed, then fast
    common = ["claim.min_idle_ms=1500", "handler.timeout_s=1", "handler.batch_size=2",
              *schedule]
    logs = tmp_path / "logs"
    # One partition: A hands over 2 entries per 0.5 s, it would need ~22 s for its backlog.
    a_only = ["claim.count=20"] if one_pass else ["claim.journal_prefix="]
    plan = planned(spark, redis_version_server.url, tmp_path, streams, *common) \
        if path == "plan" else []
    proc = submit([*job_args(redis_version_server.url, tmp_path, streams, *common, *a_only,
                             "spark.partitions=1", run_id="A"), *plan], logs, SMALL_BATCHES,
                  master="local[2]" if path == "one-pass" else "local[2,2]")
    claimed = ((lambda: job_owned(client, streams, "A") > 0) if one_pass
               else (lambda: owned_by(client, streams, DEAD) == 0))
    assert wait_until(claimed, proc, 180, "run A's claim"), "run A ended before its claim was seen"
    time.sleep(1.6)  # A's claims are now idle longer than min_idle_ms
    outcome: dict[str, Any] = {}
    split = SPLIT if path.endswith("-split") else ()
    args_b = [*job_args(redis_version_server.url, tmp_path, streams, *common, *split,
                        run_id="B"), *plan]
    run_b = threading.Thread(target=lambda: outcome.update(b=run_in_process(spark, args_b)))
    run_b.start()
    wait_until(lambda: job_owned(client, streams, "B") > 0 or not run_b.is_alive(), None, 120,
               "run B's claim")
    write_control(redis_version_server.url, delay_s=0)
    run_b.join(120)
    run_a = finished(proc, logs, timeout_s=180)
    assert (run_a.code, outcome["b"].code) == (0, 0), (run_a.stderr[-2000:], outcome["b"].stderr)
    assert ("in one pass" in run_a.stderr) is one_pass, "run A did not take the path asked for"
    assert ("journaled" in run_a.stderr) is (path in ("journaled", "plan", "journaled-split")), \
        "run A: not the path asked"

    handed = handed_over(client)
    assert handed and max(handed.values()) == 1, {k: n for k, n in handed.items() if n > 1}
    states = final_states(client, seeded)  # never dead-lettered twice
    fates = {"ok": "acked", "waiting": f"pending:{DEAD}"}
    expected = {k: fates.get(kind, "dead_lettered") for k, kind in seeded.items()}
    assert states == expected
    # A run that reported nothing has no report (B, when it took over nothing): the checks
    # below then say which entry or which run, rather than a TypeError.
    reports = {r: report_rows(spark, tmp_path, r) or [] for r in ("A", "B")}
    final = {"reprocessed", "dead_lettered"}
    for key, kind in seeded.items():
        done = [r for r in ("A", "B") for row in rows_by_key(reports[r]).get(key, [])
                if row["action"] in final]
        assert len(done) == (0 if kind == "waiting" else 1), (key, done)
    b_final = [r for r in reports["B"] if r["action"] in final]
    assert b_final, "run B took over nothing: the race this test is about did not happen"
    if split:
        assert "2 streams split over several tasks" in caplog.text, "run B split nothing"
    if schedule:
        waiting = sum(1 for kind in seeded.values() if kind == "waiting")
        assert outcome["b"].summary["not_due"] >= waiting
        assert run_a.summary["not_due"] >= waiting
