"""The first claim steps of small units sent many to a MULTI
(recovery.executor.claim.first_steps), against real servers, no Spark.

What the claim outputs is checked against Redis itself (every entry the job's consumer owns
afterwards is in the output exactly once, with Redis's delivery count), the PEL histograms
against a full XPENDING read of each PEL taken before the claim, and the reads against the
server's own command counts.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pyarrow as pa
from redis import Redis

from recovery.errors import StreamUnitError
from recovery.executor.claim.first_steps import with_first_steps
from recovery.executor.claim.gather import gathered
from recovery.executor.claim.loop import ClaimStep, claim_steps
from recovery.executor.claim.throttle import Throttle
from recovery.executor.claimed import CLAIMED_ARROW
from recovery.executor.histogram import PelHistogram
from recovery.params import JobParams, Unit
from recovery.redis_io.redis_conn import RedisConn
from recovery.settings.model import executor_params
from recovery.testing.backlog import make_stuck
from tests.support.claim_checks import DEAD, GROUP, HOUR_MS, JOB, assert_matches_redis, stuck
from tests.support.servers import command_calls

LIVE = "alive"  # an application consumer at work: its entries are not idle


def claim_all(params: JobParams, streams: list[str], histograms: dict[str, PelHistogram]
              ) -> tuple[dict[str, list[dict]], list[str]]:
    """Claim each stream's unit in order, first steps sent ahead: the CLAIMED rows by
    stream, and the streams whose group vanished. Histograms are counted where given."""
    conn = RedisConn.open(params.redis)
    rows, vanished = {}, []
    try:
        for unit, first in with_first_steps(lambda: conn, params,
                                            [Unit(s, GROUP, JOB) for s in streams]):
            try:
                steps = list(claim_steps(conn, params, unit, Throttle(None), first=first,
                                         histogram=histograms.get(unit.stream)))
            except StreamUnitError:
                vanished.append(unit.stream)
                continue
            rows[unit.stream] = pa.Table.from_batches(
                [s.claimed.to_arrow() for s in steps], schema=CLAIMED_ARROW).to_pylist()
    finally:
        conn.close()
    return rows, vanished


def as_found(client: Redis, stream: str) -> dict:
    """The buckets of a histogram of the whole PEL, every owner, read now."""
    pel = PelHistogram()
    pel.add([[r["message_id"], r["consumer"], r["time_since_delivered"], r["times_delivered"]]
             for r in client.xpending_range(stream, GROUP, "-", "+", 1000)])
    return buckets(pel, stream)


def buckets(pel: PelHistogram, stream: str) -> dict:
    row = pel.row(stream, GROUP)
    return {"deliveries": dict(row["deliveries"]), "idle_ages": dict(row["idle_ages"])}


def test_small_units_share_their_first_steps_and_each_is_claimed_whole(client, make_settings):
    """A unit of three steps, then 40 one-entry units (one whose group vanished meanwhile):
    the small units' first steps go ten to a MULTI, the vanished one's error is its own, and
    every other entry is output once, as Redis has it."""
    params = executor_params(make_settings('streams.keys=["big"]', "claim.count=10"), "r1")
    smalls = [f"s{i:02d}" for i in range(40)]
    ids = {"big": stuck(client, "big", 25), **{s: stuck(client, s, 1) for s in smalls}}
    client.xgroup_destroy("s05", GROUP)
    multis = command_calls(client, "multi")
    rows, vanished = claim_all(params, ["big", *smalls], {})
    assert vanished == ["s05"]
    # big's 3, s00, rounds of 10,10,10,9
    assert command_calls(client, "multi") - multis == 3 + 1 + 4
    for stream, want in ids.items():
        if stream != "s05":
            assert sorted(r["id"] for r in rows[stream]) == sorted(want)
            assert_matches_redis(rows[stream], client, stream)


def test_a_round_reads_each_small_pel_once_and_counts_it_as_found(client, make_settings):
    """After a one-entry unit, four small units go in one round, each PEL read whole by one
    XPENDING: entries a live consumer holds (left alone, and counted), the job consumer's
    own (one fresh: taken back; one idle: claimed again), entries deleted upstream. Each
    histogram is the PEL as found, and no read of a PEL follows the claim, save the own
    range read of the unit that holds own entries."""
    params = executor_params(make_settings('streams.keys=["a"]', "claim.count=10"), "r1")
    ids = {s: stuck(client, s, n) for s, n in [("a", 1), ("u1", 4), ("u2", 4), ("u3", 4),
                                               ("u4", 4)]}
    make_stuck(client, "u2", GROUP, LIVE, ids["u2"][2:], 0)
    make_stuck(client, "u3", GROUP, JOB, ids["u3"][1:2], 0, 2)
    make_stuck(client, "u3", GROUP, JOB, ids["u3"][3:], HOUR_MS, 2)
    client.xdel("u4", *ids["u4"][:2])
    found = {s: as_found(client, s) for s in ids}
    histograms = {s: PelHistogram() for s in ids}
    xpending = command_calls(client, "xpending")
    rows, _ = claim_all(params, list(ids), histograms)
    # "a": its idle rows, its own first entry, then what it left; the round: one read per
    # unit, and u3's own range
    assert command_calls(client, "xpending") - xpending == 3 + 4 + 1
    for stream in ids:
        assert_matches_redis(rows[stream], client, stream)
        assert buckets(histograms[stream], stream) == found[stream], stream
    assert sorted(r["id"] for r in rows["u2"]) == sorted(ids["u2"][:2])
    assert {r["id"] for r in rows["u3"] if r["fields"] is None} == {ids["u3"][1]}


def test_a_unit_grown_past_its_read_has_its_range_read_for_own_entries(client, make_settings):
    """A unit in a round of small ones holds more than a step's rows: the first ten (the
    read's) are 3 of a live consumer and 7 idle, and past them the job consumer owns a fresh
    entry among the live consumer's. The claim takes the 7 and scans on to the end; the own
    entry past the read is found by reading the claim's range, and taken back."""
    params = executor_params(make_settings('streams.keys=["a"]', "claim.count=10"), "r1")
    stuck(client, "a", 1)
    ids = stuck(client, "g", 15)
    make_stuck(client, "g", GROUP, LIVE, [*ids[:3], *ids[10:12], *ids[13:]], 0)
    make_stuck(client, "g", GROUP, JOB, ids[12:13], 0, 2)
    found = as_found(client, "g")
    histogram = PelHistogram()
    rows, _ = claim_all(params, ["a", "g"], {"g": histogram})
    assert sorted(r["id"] for r in rows["g"]) == sorted([*ids[3:10], ids[12]])
    assert_matches_redis(rows["g"], client, "g")
    assert buckets(histogram, "g") == found


def owners(client: Redis, stream: str, wait_for: str | None = None) -> set[str]:
    """The consumers owning `stream`'s pending entries; with `wait_for`, read again (up to
    2 s) until that consumer is among them: a round written ahead on another connection
    may reach the server a moment after a read sent later."""
    deadline = time.monotonic() + 2.0
    while True:
        found = {r["consumer"].decode()
                 for r in client.xpending_range(stream, GROUP, "-", "+", 100)}
        if wait_for is None or wait_for in found or time.monotonic() > deadline:
            return found
        time.sleep(0.01)


def test_a_wide_round_is_claimed_while_the_round_before_it_is_handed_over(client,
                                                                         make_settings):
    """A unit of three steps, then 31 one-entry units. Nothing is sent ahead behind the big
    unit (its next unit stays with its owner while its steps go on). Once a round of small
    units all finished in their first steps, the next round of ten is claimed before this
    one's units reach the caller (the job's in Redis while the caller holds the earlier
    unit), and the round after it is not. Every entry is output once, as Redis has it, in
    as many MULTIs as without sending ahead."""
    params = executor_params(make_settings('streams.keys=["big"]', "claim.count=10"), "r1")
    smalls = [f"s{i:02d}" for i in range(31)]
    ids = {"big": stuck(client, "big", 25), **{s: stuck(client, s, 1) for s in smalls}}
    multis = command_calls(client, "multi")
    conn = RedisConn.open(params.redis)
    seen: dict[str, tuple[set[str], set[str]]] = {}
    rows = {}
    try:
        for unit, first in with_first_steps(lambda: conn, params,
                                            [Unit(s, GROUP, JOB) for s in ["big", *smalls]]):
            if unit.stream in ("big", "s00", "s01"):  # the next round's first, the one after
                nxt = {"big": "s00", "s00": "s01", "s01": "s11"}[unit.stream]
                after = {"big": "s01", "s00": "s11", "s01": "s21"}[unit.stream]
                wait = None if unit.stream == "big" else JOB
                seen[unit.stream] = (owners(client, nxt, wait), owners(client, after))
            steps = claim_steps(conn, params, unit, Throttle(None), first=first)
            rows[unit.stream] = pa.Table.from_batches(
                [s.claimed.to_arrow() for s in steps], schema=CLAIMED_ARROW).to_pylist()
    finally:
        conn.close()
    assert seen == {"big": ({DEAD}, {DEAD}), "s00": ({JOB}, {DEAD}), "s01": ({JOB}, {DEAD})}
    assert command_calls(client, "multi") - multis == 3 + 1 + 3  # big's 3, s00, 3 rounds
    for stream, want in ids.items():
        assert sorted(r["id"] for r in rows[stream]) == sorted(want)
        assert_matches_redis(rows[stream], client, stream)


def test_a_round_sent_ahead_and_never_read_is_taken_back_by_the_next_attempt(client,
                                                                             make_settings):
    """The caller stops at the first unit with a round sent ahead (a task that fails): that
    round's entries are the job consumer's in Redis; the client still answers its own
    commands; a second attempt as the same consumer outputs every entry once."""
    params = executor_params(make_settings('streams.keys=["s00"]', "claim.count=10"), "r1")
    smalls = [f"s{i:02d}" for i in range(21)]
    ids = {s: stuck(client, s, 1) for s in smalls}
    conn = RedisConn.open(params.redis)
    try:
        steps = with_first_steps(lambda: conn, params, [Unit(s, GROUP, JOB) for s in smalls])
        assert next(steps)[0].stream == "s00"
        assert owners(client, "s10", wait_for=JOB) == {JOB}
        steps.close()
        assert conn.client.echo("mine") == b"mine"
    finally:
        conn.close()
    assert owners(client, "s11") == {DEAD}
    rows, vanished = claim_all(params, smalls, {})
    assert not vanished
    for stream, want in ids.items():
        assert sorted(r["id"] for r in rows[stream]) == sorted(want)
        assert_matches_redis(rows[stream], client, stream)


def test_a_round_sent_ahead_is_handed_over_whole_however_old_its_claims(client,
                                                                        make_settings):
    """The round sent while s00 is handed over (0.1 s here, more than the 50 ms a batch
    waits for more) comes at once afterwards: its ten one-entry steps are gathered into one
    hand-over, though their claims are older than 50 ms by then."""
    params = executor_params(make_settings('streams.keys=["s00"]', "claim.count=10"), "r1")
    smalls = [f"s{i:02d}" for i in range(11)]
    for stream in smalls:
        stuck(client, stream, 1)
    conn = RedisConn.open(params.redis)

    def steps() -> Iterator[ClaimStep]:
        for unit, first in with_first_steps(lambda: conn, params,
                                            [Unit(s, GROUP, JOB) for s in smalls]):
            yield from claim_steps(conn, params, unit, Throttle(None), first=first)
            if unit.stream == "s00":
                time.sleep(0.1)

    try:
        handed = [len(step.claimed) for step in gathered(steps(), rows=1000)]
    finally:
        conn.close()
    assert handed == [1, 10]
