"""Live consumers acking while the job claims and hands over: an entry a live consumer acked is
never handed over or dead-lettered.

Every fault here is proven to have happened, or the test fails; after each, Redis itself is
checked: every seeded entry is exactly one of acked, in its dead-letter stream exactly once,
still pending, or deleted upstream; and the reports account for what happened.
"""

from __future__ import annotations

import random
import threading
import time

import pytest

from recovery.executor.handover.lease import LEASE_FRESH_S
from recovery.testing.local_redis import LocalServer
from tests.support.backlogs import DEAD
from tests.support.fault_tools import (
    BACKOFF,
    GROUP,
    SPLIT,
    dead_letter_index,
    handed_over,
    job_args,
    key_of,
    planned,
    report_rows,
    rows_by_key,
    run_in_process,
    seed_kinds,
    write_control,
)
from tests.support.handlers import HANDLED, LIVE_ACKED, VIOLATIONS, entry_key
from tests.support.invariants import final_states

pytestmark = pytest.mark.slow  # kills, restarts and spark-submit runs


# Atomic: ack one random entry owned by a job consumer, but only while the job's claim is
# still running (the dead consumer still owns some of the stuck entries, and the claim takes
# them all before any hand-over), so the ack surely comes before the hand-over.
# KEYS: the streams, then LIVE_ACKED. ARGV: group, the dead consumer, a random number,
# '1' to ack ('0' only to ask whether the claim is done).
ACK_WHILE_CLAIMING = """
local n = #KEYS - 1
local group, dead, pick_at = ARGV[1], ARGV[2], tonumber(ARGV[3])
local unclaimed, owners = 0, {}
for i = 1, n do
  local summary = redis.call('XPENDING', KEYS[i], group)
  for _, c in ipairs(summary[4] or {}) do
    if c[1] == dead then unclaimed = unclaimed + tonumber(c[2]) end
    if string.sub(c[1], 1, 9) == 'recovery-' then owners[#owners + 1] = {KEYS[i], c[1]} end
  end
end
if unclaimed == 0 then return 'claim-done' end
if #owners == 0 or ARGV[4] == '0' then return 'not-yet' end
local pick = owners[(pick_at % #owners) + 1]
local rows = redis.call('XPENDING', pick[1], group, '-', '+', 100, pick[2])
local row = rows[(pick_at % #rows) + 1]
redis.call('XACK', pick[1], group, row[1])
local entry = pick[1] .. ' ' .. group .. ' ' .. row[1]
local now = redis.call('TIME')
redis.call('HSET', KEYS[n + 1], entry, now[1] * 1000 + math.floor(now[2] / 1000))
return entry
"""


# Atomic: once hand-overs have begun (so the job's PEL read is over and only the lease can
# notice), ack an entry owned by a job consumer that the handler has not had yet, far from
# the chunk being handed over right now: the last of a stream's unhandled entries while at
# least ARGV[2] more come before it (a unit is handed over in ID order, a chunk at a time).
# The job must find it gone at its lease and never hand it over.
# KEYS: the streams, then HANDLED, LIVE_ACKED. ARGV: group, entries ahead, a random number.
ACK_UNLEASED = """
local n = #KEYS - 2
local group, ahead, pick_at = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
if redis.call('HLEN', KEYS[n + 1]) == 0 then return 'none' end
local candidates = {}
for i = 1, n do
  local unhandled = {}
  for _, row in ipairs(redis.call('XPENDING', KEYS[i], group, '-', '+', 1000)) do
    local entry = KEYS[i] .. ' ' .. group .. ' ' .. row[1]
    if string.sub(row[2], 1, 9) == 'recovery-' and redis.call('HEXISTS', KEYS[n + 1], entry) == 0
    then
      unhandled[#unhandled + 1] = {KEYS[i], row[1], entry}
    end
  end
  if #unhandled > ahead then candidates[#candidates + 1] = unhandled[#unhandled] end
end
if #candidates == 0 then return 'none' end
local pick = candidates[(pick_at % #candidates) + 1]
redis.call('XACK', pick[1], group, pick[2])
local now = redis.call('TIME')
redis.call('HSET', KEYS[n + 2], pick[3], now[1] * 1000 + math.floor(now[2] / 1000))
return pick[3]
"""


class LiveConsumers:
    """A producer and a live consumer on the same streams, plus the slow original consumer
    that finally acks entries the job has claimed meanwhile."""

    def __init__(self, server: LocalServer, streams: list[str]) -> None:
        self.client = server.client()
        self.streams = streams
        self.ack_while_claiming = self.client.register_script(ACK_WHILE_CLAIMING)
        self.ack_unleased = self.client.register_script(ACK_UNLEASED)
        self.rng = random.Random(7)
        self.stop = threading.Event()
        self.fresh: list[tuple[str, str]] = []
        self.acked_in_claim: list[str] = []
        self.acked_later: list[str] = []
        self.thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        claiming = True
        while not self.stop.is_set():
            for stream in self.streams:
                self.fresh.append((stream, self.client.xadd(stream, {"kind": "live"}).decode()))
            for _stream, entries in self.client.xreadgroup(
                    GROUP, "worker-live", {s: ">" for s in self.streams}, count=10) or []:
                stream = _stream.decode()
                self.client.xack(stream, GROUP, *[e[0] for e in entries])
            if claiming:
                claiming = self._ack_one_while_claiming(len(self.acked_in_claim) < 12)
            elif len(self.acked_later) < 8:
                self._ack_one_not_yet_leased()
            time.sleep(0.05)

    def _ack_one_while_claiming(self, ack: bool) -> bool:
        """False once the job's claim is over."""
        reply = self.ack_while_claiming(keys=[*self.streams, LIVE_ACKED],
                                        args=[GROUP, DEAD, self.rng.randrange(10**6), int(ack)])
        if reply == b"claim-done":
            return False
        if reply != b"not-yet":
            self.acked_in_claim.append(reply.decode())
        return True

    def _ack_one_not_yet_leased(self) -> None:
        reply = self.ack_unleased(keys=[*self.streams, HANDLED, LIVE_ACKED],
                                  args=[GROUP, 12, self.rng.randrange(10**6)])
        if reply != b"none":
            self.acked_later.append(reply.decode())


@pytest.mark.parametrize(("journal", "schedule", "plan"),
                         [("", (), False), ("recovery:journal:", (), False),
                          ("recovery:journal:", BACKOFF, False), ("recovery:journal:", (), True),
                          ("recovery:journal:", SPLIT, False)],
                         ids=["materialised", "journaled", "journaled-backoff", "plan",
                              "journaled-split"])
def test_entries_acked_by_live_consumers_are_never_handed_over_or_dead_lettered(
        spark, redis_version_server, tmp_path, small_batches, caplog, journal, schedule, plan):
    """While the job runs, a live consumer keeps reading and acking new entries, and the
    original consumer acks entries the job has claimed: during the claim (the PEL read after
    the claim must drop them) and during the hand-overs (the lease must find them gone).
    Materialised (no claim journal), every claim comes before the first hand-over; journaled
    (one pass), each claim step is handed over at once, so the acks during the claim land
    between a step's claim and its hand-over, or on steps still to come, and the claim is
    over only when little is left to ack later. Under a backoff schedule (every entry
    due: the live consumer's script waits for the dead consumer to own none), the claim
    script's steps meet the acks. plan: as journaled, the run applying a dry run's plan
    made before the live consumers began (claims by ID). journaled-split: as journaled, each
    stream split over two parts (a shared cursor: the "schedule" settings carry it)."""
    client = redis_version_server.client()
    streams = ["l-a", "l-b"]
    kinds = {"poison": (10, 9), "ok": (40, 1)}  # entries for the handler come last
    seeded = seed_kinds(client, streams, kinds)
    write_control(redis_version_server.url, delay_s=0.15)
    settings = ["claim.min_idle_ms=60000", "claim.count=5", "claim.max_entries_per_s=30",
                "handler.batch_size=4", f"claim.journal_prefix={journal}", *schedule]
    url = redis_version_server.url
    plan_args = planned(spark, url, tmp_path, streams, *settings) if plan else []
    live = LiveConsumers(redis_version_server, streams)
    live.thread.start()
    result = run_in_process(spark, [*job_args(url, tmp_path, streams, *settings,
                                              run_id="live"), *plan_args])
    live.stop.set()
    live.thread.join(10)
    assert result.code == 0, result.stderr
    assert (schedule != SPLIT) or "2 streams split over several tasks" in caplog.text

    assert len(live.acked_in_claim) >= 3 and (journal or len(live.acked_later) >= 3), \
        (live.acked_in_claim, live.acked_later, "the live consumer acked too little to test")
    # The lease is read again before a call once its last reading is LEASE_FRESH_S old: an
    # ack younger than that may meet the call (one pass: the claim is the first reading).
    # A call is recorded moments after its lease check; 400 ms of slack for a loaded machine.
    late = {k: int(ms) for k, ms in client.hgetall(VIOLATIONS).items()}
    window_ms = LEASE_FRESH_S * 1000 + 400 if journal else -1
    assert all(ms <= window_ms for ms in late.values()), \
        ("handed over after a live consumer acked it", late)
    handed = handed_over(client)
    letters = dead_letter_index(client, streams)
    # One pass: an entry may be acked while the handler has it (not a violation: the
    # recording handler saw it still unacked); its row then says the job's ack came second.
    before_ack = {entry for entry in live.acked_in_claim if journal and handed[key_of(entry)]}
    for entry in live.acked_in_claim + live.acked_later:
        key = key_of(entry)
        assert handed[key] == 0 or entry in before_ack, f"{entry} handed over after its ack"
        assert key not in letters, f"{entry} dead-lettered after its ack"
    states = final_states(client, seeded)
    for key, kind in seeded.items():
        acked_live = entry_key(*key) in live.acked_in_claim + live.acked_later
        if kind == "ok" or acked_live:
            assert states[key] == "acked", (key, states[key])
        else:
            assert states[key] == "dead_lettered", (key, states[key])
    rows = rows_by_key(report_rows(spark, tmp_path, "live"))
    for entry in live.acked_in_claim + live.acked_later:
        (row,) = rows[key_of(entry)]
        if entry in before_ack:
            assert row["action"] == "reprocessed" and "acked by another consumer" in row["reason"]
        else:
            assert row["action"] == "skipped", row
    fresh = [(s, GROUP, i) for s, i in live.fresh]
    assert len(fresh) > 20
    assert not [k for k in fresh if handed[k] or k in letters or k in rows]
