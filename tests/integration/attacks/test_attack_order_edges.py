"""Attacks on per-key ordered recovery (``order.key_field``) at two edges the earlier attacks
left alone, through the job's command line on the suite's session (``run_in_process``),
checked in Redis (XPENDING, the handler's own records, the dead-letter stream):

- Redis stopped (SIGSTOP of the server) or its writes paused (CLIENT PAUSE WRITE) right
  after the handler succeeded on a key's head, before the job could ack it;
- a handler call that times out (``handler.timeout_s``) and keeps running in its abandoned
  thread past ``claim.min_idle_ms``.

A test whose docstring says FINDING failed on the code it was written against (the commit
that adds this file) and passes since the fix named in it; one that says HOLDS passed and is
kept as a cheap check that its fault landed and changed nothing it must not.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path

import pytest

from recovery.redis_io.dlq_names import dead_letter_key
from tests.support import fault_tools
from tests.support.fault_tools import (
    finished,
    kill_tree,
    run_in_process,
    spark_submit,
    wait_until,
    write_control,
)
from tests.support.hung_calls import (
    HANGS_ONCE,
    abandoned_past_min_idle,
    beating,
    call_still_running,
    key_hung_at_head,
    proc_state,
    release,
    replays_only_after_themselves,
    wait_idle,
)
from tests.support.order_edge_handlers import (
    ATTEMPTS,
    BEAT,
    BUSY_STREAM,
    EARLY,
    FINISHED,
    HANG,
    RELEASE,
)
from tests.support.order_handler import DONE, SEEN, VIOLATIONS
from tests.support.order_tools import STREAM, args, pending_owners, recorded, rows_of, seed

STOPS_REDIS = "handler.path=tests.support.order_edge_handlers:stops_redis"


@pytest.mark.slow
def test_a_timed_out_call_still_running_lets_the_next_run_hand_its_key_on(
        spark, redis_server, tmp_path: Path) -> None:
    """FINDING. Claim (GUARANTEES "Per-key order"): the handler's successful calls happen in
    ID order, an entry is handed over only after every older entry of its key succeeded
    and was acked, with a replay only right after itself.

    k0 holds H, E2, E3. In run 1 the call on H does not return within handler.timeout_s
    (1 s): the run reports H failed (timed out), holds E2 and E3, exits 0. The call's
    thread is abandoned, not stopped (``recovery.handlers._call``): it is still running
    (its beat keeps moving) in the Python worker, which Spark reuses. Once H and E2 have
    been idle claim.min_idle_ms (1.5 s), the next run on that session claims H, hands it
    over again (succeeds, acked) and then hands E2 and E3 over, while run 1's call on H is
    still running (proved by its beat, and FINISHED not set). Released afterwards, that call
    completes its side effect: Redis shows k0's successes as [H, E2, E3, H], the late
    success of H after E2 and E3 (H handled twice, once out of order). Nothing told the
    next run a call on H was still in flight: H sat idle on run 1's consumer, so it was
    claimable and no hold was read for it.

    Fixed: a timed-out call's entries stay leased to its run's consumer while it runs
    (``recovery.executor.handover.abandoned``), so H is never idle and holds k0 for the
    next run (an entry pending on another run's consumer)."""
    client, head, later = key_hung_at_head(redis_server)
    reports = tmp_path / "r"
    opts = ("spark.partitions=1", "handler.batch_size=1", "handler.timeout_s=1",
            "claim.min_idle_ms=1500", HANGS_ONCE)
    try:
        first = run_in_process(spark, args(redis_server.url, reports, *opts))
        assert first.code == 0, first.stderr[-3000:]
        rows = rows_of(spark, reports, first.summary)
        assert rows[head]["action"] == "failed" and "timed out" in rows[head]["error"], \
            rows[head]
        assert [rows[i]["action"] for i in later] == ["held", "held"]
        assert beating(client, head), "the timed-out call is not running: no fault to test"
        wait_idle(client, later, 1500)
        abandoned_past_min_idle(client, head)
        second = run_in_process(spark, args(redis_server.url, reports, *opts))
        assert second.code == 0, second.stderr[-3000:]
        still_running = call_still_running(client, head)
        seen = recorded(client, SEEN, ["k0"])["k0"]
    finally:
        release(client, head)
    done = recorded(client, DONE, ["k0"])["k0"]
    assert still_running, "run 1's call on H ended before run 2 finished: no fault to test"
    assert client.lrange(VIOLATIONS, 0, -1) == []
    assert not set(later) & set(seen[1:]), (
        f"k0's later entries {later} were handed over while run 1's call on its head {head} "
        f"was still running; handed over: {seen}; successes in Redis, in order: {done}")
    assert replays_only_after_themselves(done), f"k0's successes out of ID order: {done}"


@pytest.mark.slow
def test_a_timed_out_head_at_the_delivery_limit_releases_its_key_while_its_call_runs(
        spark, redis_server, tmp_path: Path) -> None:
    """FINDING, in one run (no second run, no shared session). Claim: an entry is handed over
    only after every older entry of its key succeeded and was acked, dead-lettered, or is
    known done; the handler's successes happen in ID order.

    k0 holds H, E2, E3; H was delivered 4 times (claim.max_deliveries 5: the run's claim
    brings it to the limit). H's call does not return within handler.timeout_s (1 s): a
    failure at the limit, so the run dead-letters H (FAILED_AT_LIMIT, its letter in
    ``orders:dlq``), which by default releases its key, and hands E2 and E3 over in the next
    waves of the same task, while H's abandoned call is still running (its beat moves,
    FINISHED unset, after the run returned). Released, that call completes its side effect:
    Redis shows k0's successes as [E2, E3, H] (H last, and H also in the dead-letter
    stream: a redrive would hand it over once more, after E3).

    Fixed: a row whose call timed out is never dead-lettered in its run (it may still
    succeed); it stays pending, failed, and holds its key; the next run's claim dead-letters
    it at the limit once its call has ended."""
    client = redis_server.client()
    write_control(redis_server.url)
    ids = seed(client, keys=1, per_key=3)["k0"]
    head, later = ids[0], ids[1:]
    client.xclaim(STREAM, "g", "worker-dead", 0, [head], idle=3_600_000, retrycount=4,
                  justid=True)
    client.sadd(HANG, head)
    reports = tmp_path / "r"
    try:
        result = run_in_process(spark, args(
            redis_server.url, reports, "spark.partitions=1", "handler.batch_size=1",
            "handler.timeout_s=1", "claim.min_idle_ms=1500", HANGS_ONCE))
        assert result.code == 0, result.stderr[-3000:]
        still_running = call_still_running(client, head)
        seen = recorded(client, SEEN, ["k0"])["k0"]
    finally:
        release(client, head)
    done = recorded(client, DONE, ["k0"])["k0"]
    letters = [f[b"x-original-id"].decode() for _, f in
               client.xrange(dead_letter_key(STREAM, ":dlq"))]
    rows = rows_of(spark, reports, result.summary)
    assert rows[head]["action"] == "failed" and "timed out" in (rows[head]["error"] or "")
    assert "may still be running" in rows[head]["reason"], rows[head]
    assert [rows[i]["action"] for i in later] == ["held", "held"]
    assert letters == []
    assert still_running, "H's call ended before the run did: no fault to test"
    assert not set(later) & set(seen[1:]), (
        f"k0's later entries {later} were handed over while the call on its head {head} "
        f"(dead-lettered as timed out at the limit) was still running; handed over: {seen}; "
        f"successes in Redis, in order: {done}; dead letters of: {letters}")


@pytest.mark.slow
def test_a_timed_out_call_still_running_lets_a_concurrent_run_hand_its_key_on(
        spark, redis_server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """FINDING. The same claim as above, with two runs at once, each a user's command (no
    session shared between them). Run A (spark-submit) recovers ``orders`` and ``busy``:
    its call on k0's head H times out (handler.timeout_s 1 s) and is abandoned while A goes
    on handing ``busy``'s 40 entries of one key over (0.5 s a call, within the timeout), so
    A's process and the thread of H's call live on. Once H, E2 and E3 have been idle
    claim.min_idle_ms (1.5 s), run B (``orders`` only; in-process) starts while A is still
    running: it claims them from A's consumer, hands H over again, then E2 and E3, while
    A's call on H is still running (its beat moves, FINISHED unset). Released, that call
    completes: Redis shows k0's successes as [H, E2, E3, H].

    Fixed as the next run's finding: A keeps H leased while its call runs."""
    client = redis_server.client()
    write_control(redis_server.url, busy_delay_s=0.5)
    ids = seed(client, keys=1, per_key=3)["k0"]
    head, later = ids[0], ids[1:]
    seed(client, keys=1, per_key=40, stream=BUSY_STREAM, prefix="b")
    client.sadd(HANG, head)
    opts = ("spark.partitions=1", "handler.batch_size=1", "handler.timeout_s=1",
            "claim.min_idle_ms=1500", HANGS_ONCE)
    if not fault_tools.SPARK_SUBMIT.exists():  # a worktree without a .venv of its own
        monkeypatch.setattr(fault_tools, "SPARK_SUBMIT",
                            Path(sys.executable).parent / "spark-submit")
    proc = spark_submit([*args(redis_server.url, tmp_path / "a", *opts),
                         "--set", f"streams.keys={STREAM},{BUSY_STREAM}"], tmp_path / "a-logs")
    try:
        wait_until(lambda: bool(client.exists(BEAT + head)), proc, 300,
                   "run A's call on H to start")
        wait_idle(client, later, 1500)
        abandoned_past_min_idle(client, head)
        assert proc.poll() is None, "run A ended before run B could start: no fault to test"
        second = run_in_process(spark, args(redis_server.url, tmp_path / "b", *opts))
        assert second.code == 0, second.stderr[-3000:]
        still_running = call_still_running(client, head)
        seen = recorded(client, SEEN, ["k0"])["k0"]
        client.set(RELEASE, 1)
        wait_until(lambda: bool(client.exists(FINISHED + head)), proc, 30,
                   "A's abandoned call to finish once released")
        done = recorded(client, DONE, ["k0"])["k0"]
        first = finished(proc, tmp_path / "a-logs", 300)
    finally:
        client.set(RELEASE, 1)
        kill_tree(proc)
    assert first.code == 0, first.stderr[-3000:]
    assert still_running, "A's call on H ended before run B finished: no fault to test"
    assert client.lrange(VIOLATIONS, 0, -1) == []
    assert not set(later) & set(seen[1:]), (
        f"k0's later entries {later} were handed over by run B while run A's call on its head "
        f"{head} was still running; handed over: {seen}; successes in Redis, in order: {done}")
    assert replays_only_after_themselves(done), f"k0's successes out of ID order: {done}"


@pytest.mark.slow
@pytest.mark.parametrize("stop", ["sigstop-brief", "sigstop-until-given-up", "pause-write"])
def test_redis_stopped_between_a_heads_success_and_its_ack_keeps_key_order(
        spark, redis_server, tmp_path: Path, stop: str) -> None:
    """HOLDS (on the code it was written against). Claim: for every key the handler's
    successes are in ID order; a later entry is never handed over before the earlier ones
    succeeded and were acked (or are known done); nothing is lost (every entry acked after
    a success, dead-lettered once, or still pending); the exit code and the report say what
    happened.

    k0 and k1 hold three entries each; wave 1 hands k0's head, then k1's head over (one call
    each). The handler succeeds on k1's head, the wave's last call, and then, before its call
    returns (so before the job sends the wave's XACK of both heads), Redis stops taking
    commands: ``sigstop-*``: SIGSTOP of the server process (checked: /proc state ``T``),
    continued after 8 s (longer than the ack's retries at redis.socket_timeout_s 1 s: the
    task fails and Spark runs it again) or only once the run has returned;
    ``pause-write``: CLIENT PAUSE 8000 WRITE (its OK recorded). Redis then shows: no entry
    handed over while an older entry of its key was still pending (the handler reads
    XPENDING before each call), successes per key in ID order with a replay only right
    after itself, every entry acked after a success or still pending, no dead letter; and
    either exit 0 with a report that agrees with the PEL (reprocessed or skipped: not
    pending; failed or held: pending), or exit 1 with one ``cannot reach Redis`` line and no
    later entry of either key handed over."""
    client = redis_server.client()
    by_key = seed(client, keys=2, per_key=3)
    last_head = by_key["k1"][0]
    every = sorted(i for key_ids in by_key.values() for i in key_ids)
    marker = tmp_path / "stopped"
    pid = redis_server.process.pid
    landed: dict[str, object] = {}
    write_control(redis_server.url, redis_pid=pid, stop_ids=[last_head],
                  stop_marker=str(marker), order_ids=by_key,
                  how="pause" if stop == "pause-write" else "sigstop", pause_ms=8000)

    def watch() -> None:
        deadline = time.monotonic() + 300
        while not marker.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        if not marker.exists():
            return
        stopping = time.monotonic() + 5  # a SIGSTOP lands when Redis is next scheduled
        while (state := proc_state(pid)) != "T" and time.monotonic() < stopping:
            time.sleep(0.01)
        landed["state"] = state
        if not ended.wait(8 if stop == "sigstop-brief" else 120):
            os.kill(pid, signal.SIGCONT)

    ended = threading.Event()  # the run has ended: the test resumes Redis itself
    watcher = threading.Thread(target=watch, daemon=True)
    if stop.startswith("sigstop"):
        watcher.start()
    opts = ("spark.partitions=1", "handler.batch_size=1", "redis.socket_timeout_s=1",
            "redis.connect_timeout_s=1", STOPS_REDIS)
    try:
        result = run_in_process(spark, args(redis_server.url, tmp_path / "r", *opts))
    finally:
        ended.set()
        if stop.startswith("sigstop"):
            os.kill(pid, signal.SIGCONT)
    if stop.startswith("sigstop"):
        assert landed.get("state") == "T", f"Redis was not stopped after the success: {landed}"
    else:
        assert marker.exists() and marker.read_text() == "paused OK", \
            "the write pause never landed"
    attempts = [v.decode() for v in client.lrange(ATTEMPTS, 0, -1)]
    assert client.lrange(EARLY, 0, -1) == [], \
        f"handed over before an older entry of its key was acked: {client.lrange(EARLY, 0, -1)}"
    assert client.lrange(VIOLATIONS, 0, -1) == []
    done = recorded(client, DONE, list(by_key))
    for key, key_done in done.items():
        assert replays_only_after_themselves(key_done), f"{key}: successes {key_done}"
    pel = pending_owners(client)
    succeeded = {i for key_done in done.values() for i in key_done}
    lost = [i for i in every if i not in pel and i not in succeeded]
    assert not lost, f"entries neither pending nor handled with success: {lost}"
    dlq = dead_letter_key(STREAM, ":dlq")
    assert not client.exists(dlq) or client.xlen(dlq) == 0, "a dead letter was written"
    if result.code == 0:
        rows = rows_of(spark, tmp_path / "r", result.summary)
        assert sorted(rows) == every
        wrong = {i: (r["action"], i in pel) for i, r in rows.items()
                 if (r["action"] in ("failed", "held")) != (i in pel)}
        assert not wrong, f"report and PEL disagree: {wrong}; calls (id attempt): {attempts}"
    else:
        assert result.code == 1, result.stderr[-3000:]
        lines = result.error_lines()
        assert len(lines) == 1 and "cannot reach Redis" in lines[0], result.stderr[-3000:]
        seen = recorded(client, SEEN, list(by_key))
        assert all(set(seen[k]) <= {by_key[k][0]} for k in by_key), seen
