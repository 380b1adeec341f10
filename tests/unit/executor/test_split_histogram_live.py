"""Issue 64: the health histogram of a split unit (recovery.driver.split: one PEL claimed by
several parts through a shared cursor) whose claim is materialised before the hand-over
counts each PEL row once, when live consumers take entries from the parts' job consumers
between claim steps.

Each part's steps count the rows of the entries they claim as found; right after its loop,
each part reads what is left in the ranges its steps took, skipping the entries it claimed
(whoever owns them by then); the driver then reads only what lies outside every part's
ranges. The parts' partition functions run in this process against each real server (no
Spark), their steps taken in turns, so the live consumers act at known moments: after each
part's first step came out.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial

import pyarrow as pa
from redis import Redis

from recovery.driver.split import Split
from recovery.executor.histogram import merged_rows
from recovery.executor.packing import unpacked
from recovery.executor.partitions import claim_partition
from recovery.executor.tally import Tally
from recovery.params import Unit, is_job_consumer
from recovery.redis_io.redis_conn import RedisConn
from recovery.redis_io.split_cursors import cursor_key, open_cursors
from recovery.schemas import UNIT, arrow
from recovery.settings.model import executor_params
from recovery.testing.backlog import make_stuck
from tests.support.claim_checks import GROUP, LIVE, OTHER, stuck, take_from
from tests.support.invariants import pel_by_delivery_count

STREAM, RUN = "s", "r1"
PARTS = [f"recovery-{RUN}-{part}" for part in range(2)]  # the parts' job consumers


def part_batch(part: int, cursor: str) -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist(
        [{"stream": STREAM, "group": GROUP, "consumer": PARTS[part], "part": part,
          "cursor": cursor}], schema=arrow(UNIT))


def in_turns(client: Redis, outs: list[Iterator[pa.RecordBatch]]
             ) -> tuple[list[pa.RecordBatch], list[str]]:
    """Run the parts' claim partitions to their ends, one PACKED batch (a claim step's
    entries, or a part's closing note) of each in turn; live consumers take three entries
    from each part once its first step came out. The batches, and the IDs taken."""
    batches: list[pa.RecordBatch] = []
    taken: list[str] = []
    started = [False] * len(outs)
    while any(out is not None for out in outs):
        for part, out in enumerate(outs):
            batch = next(out, None) if out is not None else None
            if batch is None:
                outs[part] = None  # type: ignore[call-overload]
                continue
            batches.append(batch)
            if not started[part]:
                started[part] = True
                taken += take_from(client, STREAM, PARTS[part])
    return batches, taken


def test_entries_live_consumers_take_from_the_parts_mid_claim_are_counted_once(
        client: Redis, make_settings):
    """60 entries: 45 stuck on a dead consumer, every 4th fresh on a live one (left alone,
    interleaved with the claimed ones). Two parts, steps of 5 through the shared cursor.
    After each part's first step, live consumers take 3 of its entries. The histogram (the
    parts' rows and the driver's read, added up) is XPENDING's rows as found, by delivery
    count: each row once, and it sums to the PEL's size, which no ack changed."""
    ids = stuck(client, STREAM, 60)
    make_stuck(client, STREAM, GROUP, LIVE, ids[3::4], 0, 2)  # fresh, delivered twice
    found = pel_by_delivery_count(client, STREAM, GROUP)
    assert found == {"1": 45, "2": 15}
    cursor = cursor_key(STREAM, GROUP, RUN, "00000000")
    assert cursor is not None and open_cursors(client, [cursor]) is None
    params = executor_params(make_settings(f"streams.keys={STREAM}", "claim.count=5"), RUN)
    packed, taken = in_turns(client, [claim_partition(params, histograms=True)(
        iter([part_batch(part, cursor)])) for part in range(len(PARTS))])

    owners = {r["message_id"].decode(): (r["consumer"].decode(), r["times_delivered"])
              for r in client.xpending_range(STREAM, GROUP, "-", "+", 100)}
    assert len(taken) == 6 and len(owners) == 60
    assert sorted(owners[i] for i in taken) == [(LIVE, 3)] * 4 + [(OTHER, 3)] * 2
    tally = Tally()
    entries = sum(b.num_rows for b in unpacked(packed, 1000, tally.add_note))
    assert entries == 45, "the parts' output holds every entry they claimed, taken ones too"
    assert len(tally.histogram_rows) == len(PARTS)

    split = Split([len(PARTS)], {(STREAM, GROUP): cursor}, [cursor])
    split.assigned([(Unit(STREAM, GROUP, c, cursor), p) for p, c in enumerate(PARTS)], RUN)
    conn = RedisConn.open(params.redis)  # the driver's (raw replies)
    try:
        left = split.left_rows(conn.client, partial(is_job_consumer, stem=f"recovery-{RUN}-"),
                               {}, outside_parts=True)
    finally:
        conn.close()
    (row,) = merged_rows([*tally.histogram_rows, *left])
    deliveries = dict(row.deliveries)
    assert deliveries == found, f"a row counted twice, or with its count after: {deliveries}"
    assert sum(n for _, n in row.idle_ages) == len(owners)
