"""A stream's group that vanishes mid-run costs only that unit, on every server, in every
script the job runs: the server's error code is found wherever the server put it.

Redis 6.2 wraps an error raised by ``redis.call`` in a script (``Error running script (call
to f_<sha>): @user_script:25: NOGROUP ...``); 7.0+ and Valkey keep the code first (the codes
of real replies: tests/unit/redis_io/test_error_codes.py). Whole runs on Redis 6.2 and 7.0 lose a
group at the moment each script meets it (the backoff claim, the requeue, the lease renewal,
the reassignment) and must skip that unit, succeed, and leave nothing of the surviving one
on the job's consumer.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import pytest
from redis import Redis

from recovery.executor.claimed import Claimed
from recovery.executor.handover.ready import ready
from recovery.executor.handover.routed import RoutedBatch
from recovery.params import Unit
from recovery.redis_io.redis_conn import connect
from recovery.redis_io.scripts import scripts_for
from recovery.settings.model import executor_params
from recovery.testing.local_redis import LocalServer
from tests.support.acting_proxy import ActingProxy
from tests.support.backlogs import DEAD
from tests.support.fault_tools import (
    GROUP,
    Key,
    handed_over,
    job_args,
    report_rows,
    rows_by_key,
    run_in_process,
    seed_kinds,
    write_control,
)
from tests.support.invariants import final_states, pel

# --- entries claimed by ID only, found gone at the hand-over -------------------------------

GONE_TWO = ["XDEL", "s"]  # two of the entries, named by the test
VANISHINGS = {"stream-deleted": [["DEL", "s"]],
              "two-entries-deleted": [GONE_TWO],
              "two-entries-deleted-then-group-destroyed": [GONE_TWO,
                                                           ["XGROUP", "DESTROY", "s", "g"]]}


@pytest.mark.parametrize("vanish", list(VANISHINGS))
def test_entries_claimed_by_id_and_then_gone_are_deleted_only_while_their_unit_exists(
        server: LocalServer, make_settings, vanish: str):
    """A split part's claim and a retried task take entries by ID; the hand-over fetches
    their fields (XRANGE), which answers nothing both for an entry deleted from its stream
    and for a stream deleted whole. The moment between that claim and the fetch, made
    deterministic: only entries gone from a stream that still has the group are `deleted`
    (their PEL slot acked); those of a stream deleted, or of a group destroyed, are skipped
    as vanished (docs/GUARANTEES.md), and nothing is created back in Redis. (Entries still
    readable go on to the hand-over, whose lease read finds a destroyed group.)"""
    client = server.client()
    ids = [client.xadd("s", {"n": n}).decode() for n in range(5)]
    client.xgroup_create("s", "g", "0")
    client.xreadgroup("g", "recovery-c", {"s": ">"})
    n = len(ids)
    claimed = Claimed.of_unit(Unit("s", "g", "recovery-c"), ids, [False] * n, [None] * n,
                              [0] * n, [None] * n, [1] * n)  # claimed by ID: no fields
    rb = RoutedBatch(claimed, max_deliveries=10)
    for command in VANISHINGS[vanish]:
        client.execute_command(*command, *(ids[1:3] if command is GONE_TWO else []))
    params = executor_params(make_settings('streams.keys=["s"]'), "r")
    job_client = connect(params.redis)  # the job's own connection (RESP, decoding)
    try:
        left = ready(job_client, params, rb, list(range(n)))
    finally:
        job_client.close()

    if vanish == "stream-deleted":
        assert left == [] and rb.action == ["skipped"] * n, rb.action
        assert all("vanished" in str(reason) for reason in rb.reason), rb.reason
        assert client.exists("s") == 0, "the deleted stream was created again"
        return
    assert left == [0, 3, 4] and rb.action[0::3] == [None, None], rb.action
    if vanish == "two-entries-deleted":
        assert rb.action[1:3] == ["deleted", "deleted"], rb.action
        assert [row["message_id"].decode() for row in client.xpending_range(
            "s", "g", "-", "+", 10)] == [ids[0], ids[3], ids[4]], "deleted ones' slots acked"
    else:
        assert rb.action[1:3] == ["skipped", "skipped"], rb.action
        assert all("vanished" in str(reason) for reason in rb.reason[1:3]), rb.reason
        assert client.xlen("s") == n - 2 and client.xinfo_groups("s") == []


# --- whole runs: a group destroyed at the moment a script meets it --------------------------

FIRST, SECOND = "w-first", "w-second"
STREAMS = [FIRST, SECOND]
KINDS = {"ok": (6, 1)}
DESTROY_SECOND = ["XGROUP", "DESTROY", SECOND, GROUP]
T = TypeVar("T")


def failed_tasks_in(spark, run: Callable[[], T]) -> tuple[T, int]:
    """`run()`'s result and how many Spark task attempts failed while it ran (the suite's
    session retries a failed task: the retry finds the group gone at a plain command and
    would hide the failure)."""
    tracker = spark.sparkContext.statusTracker()
    before = set(tracker.getJobIdsForGroup())
    result = run()
    failed = 0
    for job in set(tracker.getJobIdsForGroup()) - before:
        info = tracker.getJobInfo(job)
        for stage in info.stageIds if info else ():
            stage_info = tracker.getStageInfo(stage)
            failed += stage_info.numFailedTasks if stage_info else 0
    return result, failed


def run_job(spark, url: str, tmp_path, run_id: str, *overrides: str) -> Any:
    """The job on both streams, one task; asserts that it succeeded with no task failing."""
    result, failed = failed_tasks_in(spark, lambda: run_in_process(spark, job_args(
        url, tmp_path, STREAMS, "spark.partitions=1", *overrides, run_id=run_id)))
    assert result.code == 0, result.stderr[-3000:]
    assert failed == 0, f"{failed} task attempts failed: {result.stderr[-3000:]}"
    assert result.summary["status"] in ("ok", "partial"), result.summary
    return result


def check_vanished_and_survivor(client: Redis, spark, tmp_path, run_id: str,
                                seeded: dict[Key, str], done: str) -> list[dict[str, Any]]:
    """The second unit's group is gone and every entry of it the run reports is skipped as
    vanished; the first unit's entries all got `done`, and in Redis none of them is left on
    a job consumer, nor is a job consumer left in its group. Returns the second's rows."""
    assert client.xinfo_groups(SECOND) == [], "the group is really gone"
    rows = rows_by_key(report_rows(spark, tmp_path, run_id) or [])
    second = [r for key, rs in rows.items() if key[0] == SECOND for r in rs]
    assert all(r["action"] == "skipped" and "vanished" in r["reason"] for r in second), second
    first = [k for k in seeded if k[0] == FIRST]
    assert {k: [r["action"] for r in rows[k]] for k in first} == {k: [done] for k in first}
    owners = {p.consumer for p in pel(client, FIRST, GROUP).values()}
    assert not any(o.startswith("recovery-") for o in owners), owners
    assert not [c for c in client.xinfo_consumers(FIRST, GROUP)
                if c["name"].startswith(b"recovery-")]
    return second


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_group_destroyed_while_the_first_unit_is_handed_over_skips_the_backoff_claim(
        spark, redis_version_server: LocalServer, tmp_path):
    """Backoff (claim_due.lua): the first unit (1,000 entries, claimed in two steps of 500,
    a full hand-over: handed over before the next claim) comes first, being the bigger; the
    handler's first call destroys the second unit's group, whose first claim step then
    meets NOGROUP inside the script. That unit has nothing claimed: no rows, no entries."""
    server = redis_version_server
    client = server.client()
    seeded = seed_kinds(client, [FIRST], {"ok": (1000, 1)})
    seeded.update(seed_kinds(client, [SECOND], KINDS))
    write_control(server.url, on_first_call=[DESTROY_SECOND])
    run_job(spark, server.url, tmp_path, "bk", "claim.backoff_factor=2",
            "claim.backoff_max_ms=2000000", "claim.count=500")
    second = check_vanished_and_survivor(client, spark, tmp_path, "bk", seeded, "reprocessed")
    assert second == [], "destroyed before its claim"
    assert final_states(client, {k: v for k, v in seeded.items() if k[0] == FIRST}) == \
        {k: "acked" for k in seeded if k[0] == FIRST}
    assert not [k for k in handed_over(client) if k[0] == SECOND]


def proxied_run(spark, server: LocalServer, tmp_path, script: str, run_id: str,
                *overrides: str) -> Any:
    """A run through a proxy that destroys the second unit's group just before the first
    call of `script` that names the second stream reaches the server (asserted to happen)."""
    sha = scripts_for(server.client())[script].sha.encode()
    proxy = ActingProxy(server.port, [sha, SECOND.encode()], [DESTROY_SECOND])
    try:
        result = run_job(spark, proxy.url(), tmp_path, run_id, *overrides)
    finally:
        proxy.close()
    assert proxy.acted == 1, f"{script} never named {SECOND}"
    return result


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_group_destroyed_between_claim_and_requeue_skips_that_unit(
        spark, redis_version_server: LocalServer, tmp_path):
    """requeue.lua meets NOGROUP: the second unit's entries (all claimed) are skipped, the
    first unit's requeued (one copy each, originals acked)."""
    server = redis_version_server
    client = server.client()
    seeded = seed_kinds(client, STREAMS, KINDS)
    write_control(server.url)
    proxied_run(spark, server, tmp_path, "requeue", "rq", "reprocess.mode=requeue")
    second = check_vanished_and_survivor(client, spark, tmp_path, "rq", seeded, "requeued")
    assert len(second) == KINDS["ok"][0]
    assert pel(client, FIRST, GROUP) == {}, "originals acked"
    assert client.xlen(FIRST) == 2 * KINDS["ok"][0], "one copy each"
    assert client.xlen(SECOND) == KINDS["ok"][0], "no copy"


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_group_destroyed_before_the_lease_renewal_skips_that_unit(
        spark, redis_version_server: LocalServer, tmp_path):
    """lease_owned.lua meets NOGROUP: the claim is materialised (every lease is read before
    its call) and a lease older than 1 ms is renewed (handler.timeout_s as close under
    min_idle as the start check allows: 101 ms), so the renewal runs; the second unit's
    entries are never handed over."""
    server = redis_version_server
    client = server.client()
    seeded = seed_kinds(client, STREAMS, KINDS)
    write_control(server.url)
    proxied_run(spark, server, tmp_path, "lease_owned", "ls", "claim.journal_prefix=",
                "claim.min_idle_ms=600000", "handler.timeout_s=599.899")
    second = check_vanished_and_survivor(client, spark, tmp_path, "ls", seeded, "reprocessed")
    assert len(second) == KINDS["ok"][0]
    assert pel(client, FIRST, GROUP) == {}, "handled and acked"
    assert not [k for k in handed_over(client) if k[0] == SECOND]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_group_destroyed_before_the_reassignment_skips_that_unit(
        spark, redis_version_server: LocalServer, tmp_path):
    """reassign.lua meets NOGROUP (its live consumers were read just before): the second
    unit is skipped; the first unit's entries each go to the live consumer the report names
    (the seeding consumer: it was seen just now)."""
    server = redis_version_server
    client = server.client()
    seeded = seed_kinds(client, STREAMS, KINDS)
    write_control(server.url)
    proxied_run(spark, server, tmp_path, "reassign", "ra", "reprocess.mode=reassign")
    second = check_vanished_and_survivor(client, spark, tmp_path, "ra", seeded, "reassigned")
    assert len(second) == KINDS["ok"][0]
    rows = rows_by_key(report_rows(spark, tmp_path, "ra") or [])
    now = pel(client, FIRST, GROUP)
    first = [k for k in seeded if k[0] == FIRST]
    assert {k: now[k[2]].consumer for k in first} == {k: rows[k][0]["reassigned_to"]
                                                       for k in first}
    assert {now[k[2]].consumer for k in first} == {DEAD}
