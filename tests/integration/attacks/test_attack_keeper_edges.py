"""Attacks on the lease kept for a handler call abandoned at ``handler.timeout_s``
(``recovery/executor/handover/abandoned.py``: ``keep_leased``) at edges
test_attack_keeper.py and test_attack_order_edges.py left alone, through the job's command
line on the suite's session (``run_in_process``: the abandoned call and its keeper live on
in the reused Python worker after the run returned), checked in Redis (XPENDING, XINFO,
INFO server, the handler's own records):

- Redis SIGKILLed and restarted (AOF, appendfsync always) while the call still hangs (the
  hang does not depend on Redis: ``tests.support.keeper_handlers:hangs_on_file``);
- Redis busy (another client's slow script: BUSY replies) for a few seconds;
- the kept entry XCLAIMed by an application consumer, or its stream deleted and recreated
  under the same names, while the call hangs (an entry trimmed from its stream meanwhile is
  deleted upstream and releases its key: docs/GUARANTEES.md, "Delivery");
- two calls hung in one task on one unit; a call still hung across later runs;
- the keeper's XCLAIM refused by the ACL user's rules.

A test whose docstring says FINDING failed on the code it was written against; one that
says HOLDS passed and is kept as a check that its fault landed and
changed nothing it must not.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from recovery.redis_io.dlq_names import dead_letter_key
from recovery.testing.local_redis import LocalServer
from tests.support.fault_tools import (
    GROUP,
    job_args,
    run_in_process,
    write_control,
)
from tests.support.hung_calls import (
    FILE_HANG,
    HANGS_ONCE,
    MIN_IDLE_MS,
    NOX,
    OPTS,
    abandoned_past_min_idle,
    beating,
    call_finished,
    call_still_running,
    file_beating,
    first_run_hangs_on_head,
    key_hung_at_head,
    key_hung_on_file,
    pel_of,
    release,
    replays_only_after_themselves,
    second_run_past,
    user_without_xclaim,
    wait_idle,
)
from tests.support.keeper_handlers import beats
from tests.support.order_edge_handlers import BEAT, HANG, HANG_STARTED, RELEASE
from tests.support.order_handler import DONE, SEEN, VIOLATIONS
from tests.support.order_tools import STREAM, args, pending_owners, recorded, rows_of, seed
from tests.support.servers import start_server

APP = "app-consumer"  # an application consumer of the group


@pytest.fixture
def aof_server() -> Iterator[LocalServer]:
    """A fresh Redis with AOF on, every write fsynced: a SIGKILL loses nothing acked."""
    srv = start_server("redis", "--appendonly", "yes", "--appendfsync", "always")
    yield srv
    srv.stop()


@pytest.mark.slow
@pytest.mark.parametrize("down_s", [0, 10], ids=["restarted-at-once", "down-10s"])
def test_redis_restarted_while_a_timed_out_call_hangs_keeps_its_key_held(
        spark, aof_server: LocalServer, tmp_path: Path, down_s: int) -> None:
    """FINDING (down-10s, fixed); HOLDS (restarted-at-once). Claim (GUARANTEES "Per-key order",
    faults): a head whose call timed out holds its key while that call may still run: it
    stays leased to its run's consumer, so neither the next run nor one at the same time
    hands a later entry of its key over before the call has ended; the handler's successes
    per key are in ID order. ATTACKS: "a restart with AOF".

    k0 holds H, E2, E3. Run 1's call on H times out (handler.timeout_s 1 s) and hangs on a
    file, not on Redis. Then Redis is SIGKILLed and started again on the same port and
    directory (AOF, appendfsync always), at once or after 10 s down; proved: INFO server's
    run_id and the process id changed, and H is still pending on run 1's consumer (the AOF
    kept it). Once E2 and E3 have been idle claim.min_idle_ms (1.5 s) and the call has run
    3 s more since Redis came back, run 2 starts while run 1's call on H still runs (its
    beat file moves, no finished file).

    restarted-at-once: the keeper's connection reconnects, its script is loaded again
    (NOSCRIPT), H stays leased; run 2 holds k0 (E2, E3 not handed over). HOLDS.

    down-10s: the keeper's three renewals fail in a row (each ~1.4 s of redis-py retries,
    then a third of min_idle_ms) and it stops for good (``GIVE_UP_ERRORS``), although its
    call keeps running and Redis is back seconds later: H ages on run 1's consumer, run 2
    claims it, hands H over again, then E2 and E3, while run 1's call on H still runs;
    released, that call completes: Redis shows k0's successes as [H, E2, E3, H].

    At fault: ``recovery/executor/handover/abandoned.py`` ``_keep``: ``return`` after
    ``GIVE_UP_ERRORS`` errors in a row, while ``call.is_alive()``: a Redis away for a few
    seconds ends the keeping for the rest of the call, not just for the outage."""
    url = aof_server.url
    client, hang_dir, head, later = key_hung_on_file(aof_server, tmp_path)
    reports = tmp_path / "r"
    try:
        first_run_hangs_on_head(spark, url, reports, head, later, FILE_HANG)
        consumer = pending_owners(client)[head]
        assert file_beating(hang_dir, head), "the timed-out call is not running: no fault"
        before = client.info("server")["run_id"]
        pid = aof_server.process.pid  # type: ignore[union-attr]
        if down_s:
            aof_server.kill()
            time.sleep(down_s)  # Redis away: the outage itself, not an assertion
        aof_server.restart()
        client = aof_server.client()
        after = client.info("server")["run_id"]
        restarted = after != before and aof_server.process.pid != pid  # type: ignore[union-attr]
        kept_by_aof = pending_owners(client).get(head) == consumer
        still_running, seen, pel = second_run_past(
            spark, client, url, reports, hang_dir, head, later, beats(hang_dir, head),
            "the restart")
    finally:
        (hang_dir / "release").write_text("1")
    done = call_finished(client, hang_dir, head)
    assert restarted, f"Redis was not restarted: run_id {before} -> {after}"
    assert kept_by_aof, "the AOF lost H's PEL row: not the fault under test"
    assert still_running, "run 1's call on H ended before run 2 did: no fault to test"
    assert client.lrange(VIOLATIONS, 0, -1) == []
    assert not set(later) & set(seen[1:]), (
        f"Redis restarted ({before[:8]} -> {after[:8]}, down {down_s} s) while run 1's "
        f"call on {head} hung: k0's later entries {later} were handed over by run 2 while "
        f"that call still ran; handed over: {seen}; successes in Redis, in order: {done}; "
        f"PEL after run 2 (owner, idle ms, count): {pel}; run 1's consumer {consumer}")
    assert replays_only_after_themselves(done), f"k0's successes out of ID order: {done}"


@pytest.mark.slow
@pytest.mark.parametrize("how", ["xclaimed-by-app", "stream-recreated"])
def test_the_keeper_never_touches_an_entry_no_longer_its_runs(
        spark, redis_server, tmp_path: Path, how: str) -> None:
    """HOLDS. Claim (abandoned.py, lease_owned.lua): the keeper renews only entries still
    pending and owned by its run's consumer; an entry another consumer took, or a stream
    replaced under the same names, is left alone (no XCLAIM back, no idle reset).

    k0 holds H, E2, E3; run 1's call on H times out and hangs (its beat moves).
    ``xclaimed-by-app``: an application consumer XCLAIMs H (min-idle 0, JUSTID): its owner.
    ``stream-recreated``: ``orders`` is DELeted, then XADDed again with H, E2 and E3's own
    IDs and fields, XGROUP CREATE g at 0, and the application consumer reads them
    (XREADGROUP >): the new stream's PEL holds the same IDs, on that consumer. Then, while
    the call still runs, H (and, recreated, all three) is left idle past claim.min_idle_ms
    (1.5 s: more than four renewal periods of the keeper): Redis must show it still owned by
    the application consumer with its delivery count unchanged, and no consumer of the job
    created in the new group (an XCLAIM would create it)."""
    client, head, later = key_hung_at_head(redis_server)
    try:
        first_run_hangs_on_head(spark, redis_server.url, tmp_path / "r", head, later,
                                 HANGS_ONCE)
        assert beating(client, head), "the timed-out call is not running: no fault to test"
        job = pending_owners(client)[head]
        if how == "xclaimed-by-app":
            assert client.xclaim(STREAM, GROUP, APP, 0, [head], justid=True) == [head.encode()]
            watched = [head]
        else:
            fields = {i.decode(): f for i, f in client.xrange(STREAM)}
            client.delete(STREAM)
            assert not client.exists(STREAM)
            for i in [head, *later]:
                client.xadd(STREAM, fields[i], id=i)
            client.xgroup_create(STREAM, GROUP, id="0")
            client.xreadgroup(GROUP, APP, {STREAM: ">"}, count=10)
            watched = [head, *later]
        taken = pel_of(client)
        assert all(taken[i][0] == APP for i in watched), taken
        wait_idle(client, watched, MIN_IDLE_MS)
        still_running = call_still_running(client, head)
        pel = pel_of(client)
        consumers = [c["name"].decode() for c in client.xinfo_consumers(STREAM, GROUP)]
    finally:
        release(client, head)
    assert still_running, "the call on H ended before the check: no fault to test"
    assert all(pel[i][0] == APP and pel[i][2] == taken[i][2] for i in watched), (
        f"the keeper of {job} touched entries no longer its run's ({how}): before {taken}, "
        f"after {pel}")
    if how == "stream-recreated":
        assert consumers == [APP], f"consumers of the recreated group: {consumers}"
    assert not client.exists(dead_letter_key(STREAM, ":dlq"))


@pytest.mark.slow
def test_a_user_who_may_not_xclaim_fails_the_timed_out_calls_task_not_its_lease(
        spark, redis_server, tmp_path: Path) -> None:
    """FINDING (fixed). Claims: (docs/ACL.md) "With one permission missing the job stops with
    one line naming it ... and exit code 1"; (GUARANTEES "Delivery") a timed-out call's
    entries stay leased to the job's consumer while it runs, so no other run takes one while
    its call may still succeed.

    Run 1 runs as an ACL user allowed every command but XCLAIM (``+@all -xclaim``); its
    call on H, alone pending, times out (handler.timeout_s 1 s) and hangs. The claim is
    XAUTOCLAIM and the lease read right after it finds H fresh: XCLAIM is sent only by the
    keeper (lease_owned.lua, XCLAIM ... JUSTID). (Under per-key order the lease read before
    each wave renews with XCLAIM, so such a run stops before any call.)

    Found: the keeper's refused renewals were counted as errors in its thread, which gave up
    after three: run 1 exited 0, status ok, no error line; H aged on run 1's consumer while
    its call still ran, and run 2 handed it over again: H succeeded twice, the second time
    while the first call still ran.

    Now the keeper's first renewal runs in the task and its refusal is raised there: the task
    attempt fails, which ends its Python worker and the call with it; the suite's
    ``local[2,3]`` retries the task, whose call on H (the handler hangs once) succeeds. So:
    the refusal is in the ACL LOG, the abandoned call no longer runs once run 1 is done, H
    succeeded once, nothing is left pending (or, with the retries spent, run 1 stops with the
    line naming XCLAIM)."""
    client = redis_server.client()
    write_control(redis_server.url)
    user_without_xclaim(client)
    head = seed(client, keys=1, per_key=1)["k0"][0]
    client.sadd(HANG, head)
    try:
        first = run_in_process(spark, [*job_args(redis_server.url, tmp_path, [STREAM], *OPTS,
                                                 HANGS_ONCE), *NOX])
        refusals = [e["object"] for e in client.acl_log() if e["username"] == "nox"]
        assert "xclaim" in refusals, ("no refused XCLAIM: no fault", refusals)
        assert client.exists(HANG_STARTED + head), "the call on H never hung: no fault"
        assert not beating(client, head), "the abandoned call still runs after run 1"
    finally:
        client.set(RELEASE, 1)
    if first.code == 1:
        assert any("XCLAIM" in line for line in first.error_lines()), first.error_lines()
        assert recorded(client, DONE, ["k0"])["k0"] == []
        return
    assert first.code == 0, first.stderr[-3000:]
    assert (recorded(client, DONE, ["k0"])["k0"], pel_of(client)) == ([head], {})


@pytest.mark.slow
def test_two_calls_timed_out_in_one_task_on_one_unit_both_stay_leased(
        spark, redis_server, tmp_path: Path) -> None:
    """HOLDS. Claim (GUARANTEES "Delivery"): each timed-out call's entries stay leased to
    the job's consumer while it runs; no other run takes one meanwhile.

    One unit, 1,100 entries (unordered), one task: the hand-over goes in two batches of
    gathered claim steps (LEASE_ROWS, 1,000 rows), each with its own ``HandlerCalls``, so a
    timeout blocks the unit for the rest of its batch only. The calls on H1 (first batch)
    and H2 (second batch) both time out (handler.timeout_s 1 s) and hang (both beat after
    run 1 returned): two keepers, two connections, one consumer. Once H2's call has run
    3 s, Redis must show H1 and H2 pending on run 1's consumer and not idle
    claim.min_idle_ms, and run 2 (the next run) hands neither over again."""
    client = redis_server.client()
    write_control(redis_server.url)
    ids = seed(client, keys=1, per_key=1100)["k0"]
    hung = [ids[0], ids[1050]]
    client.sadd(HANG, *hung)
    opts = (*OPTS, HANGS_ONCE)
    try:
        first = run_in_process(spark, job_args(redis_server.url, tmp_path / "r1", [STREAM],
                                               *opts))
        assert first.code == 0, first.stderr[-3000:]
        both_hung = all(beating(client, h) for h in hung)
        job = pending_owners(client).get(hung[0])
        abandoned_past_min_idle(client, hung[1])
        kept = {h: pel_of(client).get(h) for h in hung}
        second = run_in_process(spark, job_args(redis_server.url, tmp_path / "r2", [STREAM],
                                                *opts))
        assert second.code == 0, second.stderr[-3000:]
        still_running = all(call_still_running(client, h) for h in hung)
        seen = recorded(client, SEEN, ["k0"])["k0"]
    finally:
        client.set(RELEASE, 1)
        for h in hung:
            if client.exists(HANG_STARTED + h):
                release(client, h)
    assert both_hung, "the two calls did not both hang: no fault to test"
    assert still_running, "a hung call ended before run 2 did: no fault to test"
    assert all(kept[h] is not None and kept[h][0] == job and kept[h][1] < MIN_IDLE_MS
               for h in hung), f"not both kept by {job} (owner, idle ms, count): {kept}"
    assert [seen.count(h) for h in hung] == [1, 1], (
        f"a hung call's entry handed over again while it ran: {[seen.count(h) for h in hung]}")


@pytest.mark.slow
def test_a_call_still_hung_holds_its_key_in_every_later_run_and_says_so(
        spark, redis_server, tmp_path: Path) -> None:
    """HOLDS. Claim (GUARANTEES "Per-key order"; ATTACKS "What the operator is told"): a
    call that does not end keeps its head leased for as long as it runs, so every later
    run holds the key, and says why: its later entries ``held`` behind the head, pending
    on another consumer; never a silent run.

    k0 holds H, E2, E3; run 1's call on H times out and hangs (the reused worker keeps it,
    and its keeper, alive past the run). Runs 2 and 3, one after the other while the call
    still runs (its beat moves, FINISHED unset), hand nothing of k0 over: E2 and E3 are
    reported ``held`` with H's ID in their reason (status ok); H stays pending on
    run 1's consumer, its delivery count unchanged by the keeping."""
    client, head, later = key_hung_at_head(redis_server)
    reports = tmp_path / "r"
    try:
        first_run_hangs_on_head(spark, redis_server.url, reports, head, later, HANGS_ONCE)
        job, _, count = pel_of(client)[head]
        runs = []
        for _ in range(2):
            abandoned_past_min_idle(client, head)
            client.delete(BEAT + head)  # the next run's wait starts from 0 beats
            result = run_in_process(spark, args(redis_server.url, reports, *OPTS, HANGS_ONCE))
            assert result.code == 0, result.stderr[-3000:]
            runs.append((result.summary.get("status"), rows_of(spark, reports, result.summary)))
        still_running = call_still_running(client, head)
        seen = recorded(client, SEEN, ["k0"])["k0"]
        pel = pel_of(client)
    finally:
        release(client, head)
    assert still_running, "the call on H ended before run 3 did: no fault to test"
    assert seen == [head], f"k0 handed over while H's call ran: {seen}"
    assert pel[head][0] == job and pel[head][2] == count, (job, count, pel)
    for status, rows in runs:
        assert head not in rows or rows[head]["action"] != "reprocessed", rows.get(head)
        for i in later:
            assert rows[i]["action"] == "held" and head in rows[i]["reason"] \
                and "pending on another consumer" in rows[i]["reason"], (status, rows[i])


BUSY_SCRIPT = """
local t0 = redis.call('TIME')
local start = tonumber(t0[1]) + tonumber(t0[2]) / 1e6
while true do
  local t = redis.call('TIME')
  if tonumber(t[1]) + tonumber(t[2]) / 1e6 - start >= tonumber(ARGV[1]) then return 'done' end
end
"""


@pytest.mark.slow
def test_another_clients_slow_script_ends_a_hung_heads_lease_for_good(
        spark, redis_server, tmp_path: Path) -> None:
    """FINDING (fixed). Claim (GUARANTEES "Per-key order", faults): a head whose call timed out
    holds its key while that call may still run; the keeping ends only "with the call, with
    the worker process, or after three failed renewals in a row (Redis away)". Redis is
    not away here: it is busy for about two seconds.

    k0 holds H, E2, E3. Run 1's call on H times out and hangs on a file (not on Redis).
    Another client then runs a read-only Lua script of 8 s (a TIME loop), past Redis's
    default busy-reply-threshold (5 s): for its last ~3 s every other command is answered
    ``BUSY Redis is busy running a script`` (proved: a PING got BUSY, and the script
    returned ``done``). redis-py does not retry BUSY (a ResponseError), so the keeper's
    queued renewal and the next two (a third of min_idle_ms apart) fail within ~1 s and it
    stops for good. Redis answers again; the call still runs (its beat file moves, no
    finished file). Once E2 and E3 have been idle claim.min_idle_ms and the call has run
    3 s more, run 2 claims H from run 1's consumer, hands it over again, then E2 and E3;
    released, run 1's call completes: Redis shows k0's successes as [H, E2, E3, H].

    At fault: ``recovery/executor/handover/abandoned.py`` ``_keep``: any three errors in a
    row end the keeping for the rest of the call (a busy server is counted as an absent
    one, and an absent one is given up for good)."""
    import threading

    import redis as redis_lib

    client, hang_dir, head, later = key_hung_on_file(redis_server, tmp_path)
    reports = tmp_path / "r"
    script: dict[str, object] = {}

    def busy() -> None:
        slow = redis_server.client(socket_timeout=30)
        script["reply"] = slow.eval(BUSY_SCRIPT, 0, 8)

    try:
        first_run_hangs_on_head(spark, redis_server.url, reports, head, later, FILE_HANG)
        consumer = pending_owners(client)[head]
        assert file_beating(hang_dir, head), "the timed-out call is not running: no fault"
        runner = threading.Thread(target=busy, daemon=True)
        runner.start()
        probe = redis_server.client(socket_timeout=30, retry=None)
        busy_seen = False
        while runner.is_alive() and not busy_seen:
            try:
                probe.ping()  # PONG until the script starts, then waits, then BUSY
            except redis_lib.ResponseError as exc:
                busy_seen = str(exc).startswith("BUSY")
            time.sleep(0.01)
        runner.join(30)
        still_running, seen, pel = second_run_past(
            spark, client, redis_server.url, reports, hang_dir, head, later,
            beats(hang_dir, head), "the busy script")
    finally:
        (hang_dir / "release").write_text("1")
    done = call_finished(client, hang_dir, head)
    assert busy_seen and script.get("reply") == b"done", (busy_seen, script)
    assert still_running, "run 1's call on H ended before run 2 did: no fault to test"
    assert not set(later) & set(seen[1:]), (
        f"after another client's 8 s script (BUSY for ~3 s) while run 1's call on {head} "
        f"hung, k0's later entries {later} were handed over by run 2 while that call still "
        f"ran; handed over: {seen}; successes in Redis, in order: {done}; PEL after run 2 "
        f"(owner, idle ms, count): {pel}; run 1's consumer {consumer}")
