"""Attacks on the hand-over lease (``recovery/executor/handover/lease.py``): before each
handler call the job checks that the entries are still its own and fresh, so that no run or
consumer claiming with the same ``claim.min_idle_ms`` takes them while the handler works on
them, and the ack after the call never acks an entry someone else owns. Each test checks
Redis itself afterwards (the PEL, what a live consumer claimed, what the handler saw)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from redis import Redis

from recovery.redis_io import scripts
from recovery.testing.backlog import add_entries, create_group, deliver, make_stuck
from tests.support.acting_proxy import ActingProxy
from tests.support.backlogs import DEAD, HOUR_MS
from tests.support.fault_tools import GROUP, JobResult, run_in_process, write_control
from tests.support.late_reply import LateReply
from tests.support.lease_handlers import CALLS, HANDED

STREAM = "payments"
LIVE = "live-worker"


class LiveClaimer(threading.Thread):
    """A live consumer that takes idle entries over with XAUTOCLAIM and the job's
    ``min_idle_ms`` (as application consumers recover their group's stuck entries), polling
    every millisecond once the handler's call number `after_call` has begun, until stopped.
    It never acks: what it claimed must still be pending on it after the run."""

    def __init__(self, client: Redis, min_idle_ms: int, after_call: int = 2) -> None:
        super().__init__(daemon=True)
        self.client, self.min_idle_ms, self.after_call = client, min_idle_ms, after_call
        self.stop = threading.Event()
        self.taken: set[str] = set()

    def run(self) -> None:
        while not self.stop.is_set() and self.client.llen(CALLS) < self.after_call:
            time.sleep(0.001)
        while not self.stop.is_set():
            reply = self.client.xautoclaim(STREAM, GROUP, LIVE, self.min_idle_ms, "0-0",
                                           count=10, justid=True)
            self.taken.update(i.decode() for i in reply)
            time.sleep(0.001)


def _stuck(client: Redis, n: int) -> list[str]:
    """`n` entries of `STREAM` pending on a dead consumer, idle an hour."""
    create_group(client, STREAM, GROUP)
    ids = add_entries(client, STREAM, n, lambda i: {"n": str(i)})
    assert deliver(client, STREAM, GROUP, DEAD, n) == ids
    make_stuck(client, STREAM, GROUP, DEAD, ids, HOUR_MS)
    return ids


def _run_beside(spark, client: Redis, live: LiveClaimer, url: str, reports: Path,  # type: ignore[no-untyped-def]
                *overrides: str) -> tuple[JobResult, dict[str, str]]:
    """The job (handler ``slow_second_call``, one entry per call) run at `url` while `live`
    claims; checked in Redis: no entry both handed to the job's handler and taken by the
    live consumer, and none the live consumer took acked by the job. Returns the run and
    the PEL's owners after it."""
    live.start()
    try:
        sets = [f"redis.url={url}", f"report.path={reports}", f"streams.keys={STREAM}",
                "handler.batch_size=1", "spark.partitions=1",
                "handler.path=tests.support.lease_handlers:slow_second_call", *overrides]
        result = run_in_process(spark, [a for s in sets for a in ("--set", s)])
    finally:
        live.stop.set()
        live.join(10)
    handed = {i for call in client.lrange(CALLS, 0, -1) for i in call.decode().split()}
    both = sorted(handed & live.taken)
    assert both == [], (f"handed to the job's handler and taken by a live consumer with the "
                        f"same min_idle_ms during the hand-over: {both}")
    owners = {r["message_id"].decode(): r["consumer"].decode()
              for r in client.xpending_range(STREAM, GROUP, "-", "+", 10)}
    acked_on_live = sorted(live.taken - set(owners))
    assert acked_on_live == [], f"acked by the job while the live consumer owned them: " \
                                f"{acked_on_live}"
    return result, owners


@pytest.mark.slow
def test_a_timeout_within_a_lease_reading_of_min_idle_is_refused(spark, redis_server,
                                                                 tmp_path: Path) -> None:
    """Finding: ``handler.timeout_s`` 1.999 s with ``claim.min_idle_ms`` 2000 passed the start
    check (the timeout is shorter), but a lease reading serves the calls of the next 100 ms
    (``LEASE_FRESH_S``): an entry renewed (idle 0) and handed over up to 100 ms later, in a
    call of up to 1.999 s, reaches 2000 ms idle while the handler still works on it, and the
    ack queued for after the next call later still. A live consumer claiming with the same
    min_idle_ms took both entries during the second call; the job handed them over and then
    acked them on that consumer's PEL. The margin must exceed a reading's life: the run is
    refused at start (exit 2), nothing claimed."""
    client = redis_server.client()
    ids = _stuck(client, 2)
    write_control(redis_server.url, stream=STREAM, group=GROUP, first_s=0.04, until_s=1.98)
    result, owners = _run_beside(spark, client, LiveClaimer(redis_server.client(), 2000),
                                 redis_server.url, tmp_path / "r", "claim.min_idle_ms=2000",
                                 "handler.timeout_s=1.999")
    assert result.code == 2, (result.code, result.stderr[-2000:])
    (line,) = result.error_lines()
    assert "handler.timeout_s (1.999 s)" in line and "100 ms" in line, line
    assert owners == {i: DEAD for i in ids}, "a refused run touched the PEL"


@pytest.mark.slow
def test_a_lease_renewal_answered_late_is_not_taken_for_a_fresh_one(spark, redis_server,
                                                                   tmp_path: Path) -> None:
    """Finding: the replies to the lease renewal (``lease_owned.lua``: the entry's idle time
    reset to 0) reach the job 1.6 s after the server ran it (a stalled link or proxy; a
    server blocked between running a command and writing its reply), twice in a row. The
    job reads a lease again once when the first comes back stale, then takes the second
    renewal for fresh and calls the handler at once; with ``claim.min_idle_ms`` 2000 and
    ``handler.timeout_s`` 1.85, the entry reaches 2000 ms idle 0.4 s into the call, and a
    live consumer claiming with that min_idle_ms takes it while the handler still works on
    it; the job then acks it on that consumer's PEL. A lease whose reading comes back too
    late for the call to end before ``min_idle_ms`` must be read (renewed) again before the
    call."""
    client = redis_server.client()
    _stuck(client, 1)
    write_control(redis_server.url, stream=STREAM, group=GROUP, first_s=0, until_s=1.8,
                  waiting_call=1)
    sha = client.script_load(scripts._source("lease_owned")).encode()  # no NOSCRIPT round
    proxy = LateReply(redis_server.port, markers=(b"EVALSHA", sha), delay_s=1.6, times=2)
    try:
        result, owners = _run_beside(
            spark, client, LiveClaimer(redis_server.client(), 2000, after_call=1), proxy.url(),
            tmp_path / "r", "claim.min_idle_ms=2000", "handler.timeout_s=1.85",
            "claim.journal_prefix=")
    finally:
        proxy.close()
    assert proxy.delayed == 2, "the renewals were not sent twice (the fault did not happen)"
    assert result.code == 0, result.stderr[-3000:]
    assert owners == {}, f"left pending: {owners}"


@pytest.mark.slow
def test_entries_past_the_first_thousand_are_leased_before_their_call(spark, redis_server,
                                                                    tmp_path: Path) -> None:
    """Finding: the hand-over reads leases a window of ``LEASE_ROWS`` (1000) rows at a time
    and reads again only once the last reading is ``LEASE_FRESH_S`` old; a fast handler
    (1000 messages per call) done with the first window within that time went on to the
    second window without reading its rows' lease at all. A live consumer that took 50 of
    them (XCLAIM) after the run's claim, before the hand-over began (here: while the run
    dead-lettered a poison entry), had them handed to the job's handler anyway, and acked
    by the job on its PEL. Every entry must be leased before its call."""
    client = redis_server.client()
    ids = _stuck(client, 1101)
    make_stuck(client, STREAM, GROUP, DEAD, ids[:1], HOUR_MS, 9)  # over the limit: moved
    taken = ids[-50:]
    write_control(redis_server.url)
    sha = client.script_load(scripts._source("dead_letter")).encode()
    proxy = ActingProxy(redis_server.port, [b"EVALSHA", sha],
                        [("XCLAIM", STREAM, GROUP, LIVE, 0, *taken)])
    try:
        sets = [f"redis.url={proxy.url()}", f"report.path={tmp_path / 'r'}",
                f"streams.keys={STREAM}", "claim.journal_prefix=", "handler.batch_size=1000",
                "spark.partitions=1", "handler.path=tests.support.lease_handlers:records"]
        result = run_in_process(spark, [a for s in sets for a in ("--set", s)])
    finally:
        proxy.close()
    assert proxy.acted == 1, "no dead-letter move before the hand-over (the fault did not happen)"
    assert result.code == 0, result.stderr[-3000:]
    handed = {i.decode() for i in client.smembers(HANDED)}
    assert sorted(handed & set(taken)) == [], "handed over after a live consumer took them"
    owners = {r["message_id"].decode(): r["consumer"].decode()
              for r in client.xpending_range(STREAM, GROUP, "-", "+", 2000)}
    assert owners == dict.fromkeys(taken, LIVE), "the live consumer's entries acked by the job"
    assert handed == set(ids[1:-50])
