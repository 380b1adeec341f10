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

from recovery.testing.backlog import add_entries, create_group, deliver, make_stuck
from tests.support.backlogs import DEAD, HOUR_MS
from tests.support.fault_tools import GROUP, run_in_process, write_control
from tests.support.lease_handlers import CALLS

STREAM = "payments"
LIVE = "live-worker"


class LiveClaimer(threading.Thread):
    """A live consumer that takes idle entries over with XAUTOCLAIM and the job's
    ``min_idle_ms`` (as application consumers recover their group's stuck entries), polling
    every millisecond once the handler's second call has begun, until stopped. It never
    acks: what it claimed must still be pending on it after the run."""

    def __init__(self, client: Redis, min_idle_ms: int) -> None:
        super().__init__(daemon=True)
        self.client, self.min_idle_ms = client, min_idle_ms
        self.stop = threading.Event()
        self.taken: set[str] = set()

    def run(self) -> None:
        while not self.stop.is_set() and self.client.llen(CALLS) < 2:
            time.sleep(0.001)
        while not self.stop.is_set():
            reply = self.client.xautoclaim(STREAM, GROUP, LIVE, self.min_idle_ms, "0-0",
                                           count=10, justid=True)
            self.taken.update(i.decode() for i in reply)
            time.sleep(0.001)


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
    create_group(client, STREAM, GROUP)
    ids = add_entries(client, STREAM, 2, lambda i: {"n": str(i)})
    assert deliver(client, STREAM, GROUP, DEAD, 2) == ids
    make_stuck(client, STREAM, GROUP, DEAD, ids, HOUR_MS)
    write_control(redis_server.url, stream=STREAM, group=GROUP, first_s=0.04, until_s=1.98)
    live = LiveClaimer(redis_server.client(), 2000)
    live.start()
    try:
        sets = [f"redis.url={redis_server.url}", f"report.path={tmp_path / 'r'}",
                f"streams.keys={STREAM}", "claim.min_idle_ms=2000", "handler.timeout_s=1.999",
                "handler.batch_size=1", "spark.partitions=1",
                "handler.path=tests.support.lease_handlers:slow_second_call"]
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
    assert acked_on_live == [], f"acked by the job while the live consumer owned them: {acked_on_live}"
    assert result.code == 2, (result.code, result.stderr[-2000:])
    (line,) = result.error_lines()
    assert "handler.timeout_s (1.999 s)" in line and "100 ms" in line, line
    assert owners == {i: DEAD for i in ids}, "a refused run touched the PEL"
