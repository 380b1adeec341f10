"""One unit's claim on an executor: the XAUTOCLAIM cursor loop, each claimed entry joined
with its PEL row (last owner, idle time, delivery count), step by step as Python columns
(``recovery.executor.claimed.Claimed``: handed over at once in one pass, packed for the materialised
path) or as CLAIMED Arrow batches (``claim_unit``).

XAUTOCLAIM runs from ``0-0``, passing the cursor back unchanged until it is ``0-0`` again.
Each step is one MULTI that reads, just before the claim,

- the ``XPENDING ... IDLE`` rows of the same range: the PEL as found (a claimed entry's
  delivery count is its row's plus one);
- the job consumer's first own entry at or after the cursor. There is normally none: what
  the loop claimed so far lies before the cursor. One there was claimed by an earlier attempt
  of this task, or by an earlier send of this very step whose reply was lost (redis-py sends a
  step again after a connection error; what the first send claimed is no longer idle, so the
  second send skips it).

Only after a step whose own-entry read found one (or, as guards never seen to trigger,
whose claimed entries are not all in its range read, or whose Redis 6.2 nil entries could
not be matched to their IDs by position) does one more
read of the job consumer's entries in the step's range follow: it takes those entries back
(reported after the loop, their fields fetched at hand-over) and gives the claimed ones their
counts. The steps' ranges tile the whole PEL, so every entry the job consumer owns when the
loop ends is in the output exactly once, without a second pass over the PEL. The output is
in claim order: the unit's entries contiguous, ascending by ID, entries taken back last.

Under a backoff schedule (``claim.backoff_factor``, ``recovery.executor.claim.backoff``) each step
is instead one script call (``recovery.redis_io.claim_due.claim_due_batch``) that reads a page
of ``XPENDING ... IDLE`` rows and the own first entry, and XCLAIMs exactly the due ones, all
atomically; the rest of the loop is the same. The entries left alone are counted (``NotDue``).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from functools import partial

import pyarrow as pa
import redis

from recovery.executor.claim.backoff import NotDue, due_step
from recovery.executor.claim.first_steps import FirstStep
from recovery.executor.claim.shared import shared_steps, taken_ranges
from recovery.executor.claim.throttle import Throttle
from recovery.executor.claim.walk import OWN_PAGE, ClaimStep, Walk, examined
from recovery.executor.claimed_ids import ClaimedIds
from recovery.executor.histogram import PelHistogram
from recovery.params import JobParams, Unit
from recovery.redis_io.autoclaim import ClaimBatch, claim_batch
from recovery.redis_io.claim_due import claim_due_batch, taken_range
from recovery.redis_io.error_codes import unit_vanished
from recovery.redis_io.redis_conn import RedisConn
from recovery.redis_io.round_trips import each
from recovery.redis_io.streams import (
    END_CURSOR,
    ID,
    OWNER,
    PendingRow,
    as_str,
    pending_command,
    pending_pages,
)

log = logging.getLogger(__name__)
__all__ = ["OWN_PAGE", "ClaimStep", "claim_steps", "claim_unit", "examined", "left_reads",
           "ranges_left"]


def claim_unit(conn: RedisConn, params: JobParams, unit: Unit,
               throttle: Throttle) -> Iterator[pa.RecordBatch]:
    """CLAIMED batches of one unit: everything its job consumer owns once the loop ends."""
    for step in claim_steps(conn, params, unit, throttle):
        yield step.claimed.to_arrow()


def claim_steps(conn: RedisConn, params: JobParams, unit: Unit,
                throttle: Throttle, histogram: PelHistogram | None = None,
                count_left: bool = True, waiting: NotDue | None = None,
                first: FirstStep | None = None
                ) -> Iterator[ClaimStep]:
    """:func:`claim_unit`'s entries step by step (as Python columns), each step with the
    moment its claim was sent. `first`: the unit's first step, already sent
    (``recovery.executor.claim.first_steps``); the loop goes on from it. A part of a split unit
    (``Unit.cursor``) claims through the shared cursor (``recovery.executor.claim.shared``).

    With `histogram`, also counts the unit's PEL as found: each step's rows as read just
    before its claim, then (unless `count_left` is False: the caller does it, see
    ``left_reads``), once every step was handed over, one read of what the loop left (the
    rows other consumers own: entries not idle enough, or delivered meanwhile; not those the
    steps counted, which a live consumer may have taken from the job meanwhile:
    ``PelHistogram.claimed``), unless
    the first step's read saw the whole PEL (``ClaimBatch.left``: counted from it). A part
    of a split unit reads only the ranges its steps took (``ranges_left``); the driver reads
    the rest of the unit's PEL once every part is done (``recovery.driver.split``).
    With `waiting`, counts the entries a backoff schedule left alone, not due yet.
    """
    # Read right after the loop: what the steps count as found is noted, for that read to
    # skip (an entry a live consumer took from the job meanwhile).
    left_read = histogram if count_left else None
    if left_read is not None:
        left_read.claimed = ClaimedIds()
    walk = Walk(conn, params, unit, throttle, histogram, waiting)
    if unit.cursor is None:
        yield from walk.steps(partial(claim_step, conn.client, params, unit), END_CURSOR, first)
    else:
        yield from shared_steps(walk)
    yield from walk.taken_back()
    if left_read is not None and not left_read.left_counted:
        if unit.cursor is None:
            left_reads(conn, [(unit, left_read)])
        else:
            ranges_left(conn, unit, left_read)


def claim_step(client: redis.Redis, params: JobParams, unit: Unit, cursor: str,
               ahead: int) -> ClaimBatch:
    """One claim step from `cursor`: XAUTOCLAIM (every idle entry), or under a backoff
    schedule the script that claims only the due ones, with the fields of up to `ahead`
    stream entries from `cursor` read behind it (the loop passes 0 after a step that
    claimed fewer than half the rows it read: the due entries are spread out, and reading
    the ones between them would be waste)."""
    if params.backoff:
        return claim_due_batch(client, unit, due_step(params, cursor), ahead)
    return claim_batch(client, unit, params.min_idle_ms, cursor, params.count)


def left_reads(conn: RedisConn, units: list[tuple[Unit, PelHistogram]]) -> None:
    """Count the PEL rows other consumers own once each unit's loop is done: what it did not
    claim (usually none, a read of an empty PEL). The units' first pages go in one pipeline;
    a unit that vanished meanwhile is left out."""
    _left_in(conn, [(unit, histogram, "-", "+") for unit, histogram in units])
    for _, histogram in units:
        histogram.kept.clear()  # read: no row of it is carried to the driver
        histogram.claimed = None


def ranges_left(conn: RedisConn, unit: Unit, histogram: PelHistogram) -> None:
    """Count the PEL rows other consumers own, once a split unit's part is done, in the
    ranges its steps took (its list of ranges, earlier attempts' included: together the
    parts' ranges cover the PEL, ``recovery.executor.claim.shared``), but the entries its
    steps counted as found (``PelHistogram.claimed``), whoever owns them by then. The
    ranges' first pages go in one pipeline."""
    _left_in(conn, [(unit, histogram, *taken_range(taken)) for taken in taken_ranges(conn, unit)])
    histogram.claimed = None


def _left_in(conn: RedisConn, reads: list[tuple[Unit, PelHistogram, str, str]]) -> None:
    """Count the PEL rows other consumers own from each read's first to its last ID
    (inclusive, or ``-`` / ``+``) into its histogram, but the rows it skips
    (``PelHistogram.add_unclaimed``). The reads' first pages go in one pipeline; a unit that
    vanished meanwhile is left out."""
    replies = each(conn.client, [pending_command(u.stream, u.group, first, last, OWN_PAGE)
                                 for u, _, first, last in reads])
    for (unit, histogram, _, last), page in zip(reads, replies, strict=True):
        if isinstance(page, Exception) and unit_vanished(page):
            continue
        conn.checked(page, unit.stream, unit.group)
        _add_left(unit, histogram, page)  # type: ignore[arg-type]
        if len(page) == OWN_PAGE:  # type: ignore[arg-type]
            with conn.errors(unit.stream, unit.group):
                for more in pending_pages(conn.client, unit.stream, unit.group, OWN_PAGE,
                                          start="(" + as_str(page[-1][ID]),  # type: ignore[index]
                                          end=last):
                    _add_left(unit, histogram, more)


def _add_left(unit: Unit, histogram: PelHistogram, page: list[PendingRow]) -> None:
    mine = unit.consumer.encode()
    histogram.add_unclaimed([row for row in page if row[OWNER] != mine])


