"""Issue 64: the health histogram of a run whose claim is materialised before the hand-over
(recovery.executor.partitions.claim_partition) counts each PEL row once, when a live
consumer takes entries from the job's consumer between two of the unit's claim steps.

The claim steps count the rows of the entries they claim as found; the read of what the
claim left, right after the loop, finds the taken ones on another consumer and must skip
them. The partition function runs in this process against each real server (no Spark), so
the live consumer acts at a known moment: after the first step's entries came out.
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
import pytest
from redis import Redis

from recovery.executor.packing import unpacked
from recovery.executor.partitions import claim_partition
from recovery.executor.tally import Tally
from recovery.schemas import UNIT, arrow
from recovery.settings.model import executor_params
from recovery.testing.backlog import make_stuck
from tests.support.claim_checks import GROUP, JOB, LIVE, OTHER, stuck, take_from
from tests.support.invariants import pel_by_delivery_count

STREAM = "s"


def unit_batch() -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist(
        [{"stream": STREAM, "group": GROUP, "consumer": JOB, "part": 0}], schema=arrow(UNIT))


def claimed_with_takes(client: Redis, out: Iterator[pa.RecordBatch]
                       ) -> tuple[list[pa.RecordBatch], list[str]]:
    """Run the claim partition to its end, the live consumers taking entries once the
    first step's entries came out: its PACKED batches, and the IDs taken."""
    batches: list[pa.RecordBatch] = []
    taken: list[str] = []
    for batch in out:
        batches.append(batch)
        if not taken:
            taken = take_from(client, STREAM)
    return batches, taken


@pytest.mark.parametrize("schedule", [(), ("claim.backoff_factor=1000",)],
                         ids=["xautoclaim", "backoff"])
def test_entries_a_live_consumer_takes_mid_claim_are_counted_once(client: Redis,
                                                                  make_settings, schedule):
    """40 entries: 30 stuck on a dead consumer, every 4th fresh on a live one (left alone,
    interleaved with the claimed ones: the read of what the claim left counts them).
    Steps of 5. After the first step, live consumers take 3 of the job's entries. The
    histogram is XPENDING's rows as found, by delivery count: each row once, and it sums
    to the PEL's size, which no ack changed."""
    ids = stuck(client, STREAM, 40)
    make_stuck(client, STREAM, GROUP, LIVE, ids[3::4], 0, 2)  # fresh, delivered twice
    found = pel_by_delivery_count(client, STREAM, GROUP)
    assert found == {"1": 30, "2": 10}
    settings = make_settings(f"streams.keys={STREAM}", "claim.count=5", *schedule)
    params = executor_params(settings, "r1")
    packed, taken = claimed_with_takes(
        client, claim_partition(params, histograms=True)(iter([unit_batch()])))

    owners = {r["message_id"].decode(): (r["consumer"].decode(), r["times_delivered"])
              for r in client.xpending_range(STREAM, GROUP, "-", "+", 100)}
    assert {owners[i] for i in taken[:2]} == {(LIVE, 3)}
    assert owners[taken[2]] == (OTHER, 3)
    assert len(owners) == 40
    tally = Tally()
    entries = sum(b.num_rows for b in unpacked(packed, 1000, tally.add_note))
    assert entries == 30, "the claim output holds every entry it claimed, taken ones too"
    (row,) = tally.histogram_rows
    deliveries = dict(row.deliveries)
    assert deliveries == found, f"a row counted twice, or with its count after: {deliveries}"
    assert sum(n for _, n in row.idle_ages) == len(owners)
