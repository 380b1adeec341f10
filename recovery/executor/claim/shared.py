"""A part's claim of a split unit: steps through the cursor the unit's parts share, each
recorded, atomically with its claim, in the part's list of ranges taken (``claim_due.lua``).

The ranges a part's steps take do not tile the PEL (the other parts take the ranges in
between), but the part's list holds every range any attempt of the part took, lost replies
included. So a part's loop is:

1. the ranges its earlier attempts took (the list as the attempt found it), walked again as
   fixed ranges: what the failed attempt claimed and still holds is taken back, its entries
   still idle claimed, its rows counted again for the histogram and the entries not due, as
   a retried task's XAUTOCLAIM loop does over the whole PEL;
2. steps through the shared cursor until it is done;
3. any range in the list that neither 1 nor 2 saw (a step whose reply was lost, sent again:
   the first send took its range, the second the next one), walked again the same way.

Every entry the part's consumer owns is then in one of the ranges walked, each looked for
with the step's own-entry read bounded by its range, so the loop's output holds each such
entry exactly once, as for a whole unit.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial

from recovery.executor.claim.backoff import due_step
from recovery.executor.claim.walk import ClaimStep, Walk
from recovery.params import Unit
from recovery.redis_io.autoclaim import ClaimBatch
from recovery.redis_io.claim_due import claim_due_batch, taken_range
from recovery.redis_io.commands import list_items
from recovery.redis_io.redis_conn import RedisConn
from recovery.redis_io.split_cursors import ranges_key
from recovery.redis_io.streams import END_CURSOR


def _ranges(unit: Unit) -> str:
    """The key of the list of ranges `unit`'s part took."""
    assert unit.cursor is not None
    return ranges_key(unit.cursor, unit.consumer)


def shared_steps(walk: Walk) -> Iterator[ClaimStep]:
    """The part's claim steps over its earlier ranges, the shared cursor, then the ranges it
    took without seeing their replies (module doc)."""
    unit = walk.unit
    earlier = taken_ranges(walk.conn, unit)
    for taken in earlier:
        yield from _again(walk, taken)
    mine: set[str] = set()
    yield from walk.steps(partial(_shared_step, walk, mine), END_CURSOR)
    seen = set(earlier) | mine
    for taken in taken_ranges(walk.conn, unit):
        if taken not in seen:
            yield from _again(walk, taken)


def _again(walk: Walk, taken: str) -> Iterator[ClaimStep]:
    """One range taken earlier, walked again as fixed range (its own-entry reads bounded by
    it)."""
    first, last = taken_range(taken)
    step = partial(_range_step, walk, last)
    return walk.steps(step, first, end=last)


def taken_ranges(conn: RedisConn, unit: Unit) -> list[str]:
    """The ranges the part's list holds, in the order they were taken (``claim_due.lua``:
    ``<start> <last>`` each; ``taken_range`` reads one)."""
    with conn.errors(unit.stream, unit.group):
        return list_items(conn.client, _ranges(unit))


def _shared_step(walk: Walk, mine: set[str], cursor: str, ahead: int) -> ClaimBatch:
    """A step through the shared cursor (`cursor`, `ahead` unused: the cursor says where);
    the range it took goes into `mine`."""
    unit = walk.unit
    assert unit.cursor is not None
    batch = claim_due_batch(walk.conn.client, unit, due_step(walk.params, cursor),
                            shared=(unit.cursor, _ranges(unit)))
    if batch.taken is not None:
        mine.add(batch.taken)
    return batch


def _range_step(walk: Walk, last: str, cursor: str, ahead: int) -> ClaimBatch:
    """A step of a fixed range, from `cursor` to `last` (inclusive)."""
    return claim_due_batch(walk.conn.client, walk.unit, due_step(walk.params, cursor, last), ahead)
