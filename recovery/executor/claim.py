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

Under a backoff schedule (``claim.backoff_factor``, ``recovery.executor.backoff``) each step
is instead one script call (``recovery.redis_io.claim_due.claim_due_batch``) that reads a page
of ``XPENDING ... IDLE`` rows and the own first entry, and XCLAIMs exactly the due ones, all
atomically; the rest of the loop is the same. The entries left alone are counted (``NotDue``).
"""

from __future__ import annotations

import logging
import time
from bisect import bisect_right
from collections.abc import Iterator
from typing import NamedTuple

import pyarrow as pa
import redis

from recovery.counts import saturate_all
from recovery.executor.backoff import NotDue, schedule_args
from recovery.executor.claimed import Claimed, carrying, field_pairs
from recovery.executor.faults import maybe_fail
from recovery.executor.first_steps import FirstStep
from recovery.executor.histogram import PelHistogram
from recovery.executor.throttle import Throttle
from recovery.params import JobParams, Unit
from recovery.redis_io.autoclaim import ClaimBatch, claim_batch
from recovery.redis_io.claim_due import claim_due_batch
from recovery.redis_io.redis_conn import redis_errors, unit_vanished
from recovery.redis_io.streams import (
    COUNT,
    END_CURSOR,
    ID,
    IDLE,
    OWNER,
    PendingRow,
    as_str,
    each,
    pending_command,
    pending_pages,
    shown,
    stream_id_key,
)

log = logging.getLogger(__name__)

OWN_PAGE = 10_000  # XPENDING rows per read of the job consumer's own entries
PROGRESS_EVERY = 100_000  # entries between two progress lines of one unit


class ClaimStep(NamedTuple):
    """Claimed entries and, for entries this loop claimed, when their claim was sent
    (``time.monotonic()`` seconds): the claim is a reading of their lease, no younger than
    that. None for entries taken back, whose ownership was read earlier in the loop.
    `joins`: how many claim steps it holds (``recovery.executor.gather``)."""

    claimed: Claimed
    sent_at: float | None
    joins: int = 1


def claim_unit(client: redis.Redis, params: JobParams, unit: Unit,
               throttle: Throttle) -> Iterator[pa.RecordBatch]:
    """CLAIMED batches of one unit: everything its job consumer owns once the loop ends."""
    for step in claim_steps(client, params, unit, throttle):
        yield step.claimed.to_arrow()


def claim_steps(client: redis.Redis, params: JobParams, unit: Unit,
                throttle: Throttle, histogram: PelHistogram | None = None,
                count_left: bool = True, waiting: NotDue | None = None,
                first: FirstStep | None = None
                ) -> Iterator[ClaimStep]:
    """:func:`claim_unit`'s entries step by step (as Python columns), each step with the
    moment its claim was sent. `first`: the unit's first step, already sent
    (``recovery.executor.first_steps``); the loop goes on from it.

    With `histogram`, also counts the unit's PEL as found: each step's rows as read just
    before its claim, then (unless `count_left` is False: the caller does it, see
    ``left_reads``), once every step was handed over, one read of what the loop left (the
    rows other consumers own: entries not idle enough, or delivered meanwhile), unless
    the first step's read saw the whole PEL (``ClaimBatch.left``: counted from it).
    With `waiting`, counts the entries a backoff schedule left alone, not due yet.
    """
    stream, group = unit.stream, unit.group
    owned: dict[bytes, PendingRow] = {}  # taken back: the job consumer's, not claimed here
    ranges: list[tuple[str, str]] = []  # a shared claim's steps: (start, next cursor)
    cursor, step, claimed = END_CURSOR, 0, 0
    ahead = params.count  # entries whose fields a backoff step reads ahead (see claim_step)
    while True:
        sent_at = time.monotonic() if first is None else first.sent_at
        with redis_errors(params.redis, stream, group):
            batch = _sent(first) if first is not None else claim_step(client, params, unit,
                                                                      cursor, ahead)
            first = None
            if batch.start is not None:
                cursor = batch.start
                ranges.append((cursor, batch.next_cursor))
            counts = _read_own_range(client, unit, batch, cursor, owned)
        step += 1
        if histogram is not None:
            histogram.add(examined(batch))
            if batch.left is not None:
                histogram.add_left(batch.left)
        if waiting is not None and batch.not_due:
            waiting.add(batch.not_due, batch.due_in_ms, int(time.time() * 1000))
        seen = len(batch.ids) + len(batch.deleted)
        ahead = params.count if 2 * seen >= len(batch.before) else 0
        if seen:
            yield ClaimStep(_claimed(unit, batch, counts), sent_at)
        claimed, before = claimed + seen, claimed
        if claimed // PROGRESS_EVERY > before // PROGRESS_EVERY:
            log.info("claim %s / %s: %d entries so far", stream, group, claimed)
        maybe_fail("claim", step)
        throttle.take(seen)
        cursor = batch.next_cursor
        if cursor == END_CURSOR:
            break
    if unit.cursor is not None:
        with redis_errors(params.redis, stream, group):
            _owned_elsewhere(client, unit, ranges, owned)
    if owned:
        log.info("claim %s / %s: %d entries taken back (claimed by an earlier attempt or "
                 "through a lost reply)", stream, group, len(owned))
        rows = sorted(owned.values(), key=lambda r: stream_id_key(r[ID].decode()))
        if histogram is not None:
            histogram.add(rows)
        yield ClaimStep(_owned(unit, rows), None)
    if histogram is not None and count_left and not histogram.left_counted \
            and unit.cursor is None:
        left_reads(client, params, [(unit, histogram)])


def _owned_elsewhere(client: redis.Redis, unit: Unit, ranges: list[tuple[str, str]],
                     owned: dict[bytes, PendingRow]) -> None:
    """A shared claim's last read: the job consumer's entries outside this loop's steps'
    ranges (`ranges`: (start, next cursor) each, ascending), taken back into `owned`.

    The steps of a shared claim do not tile the PEL (the other parts take the ranges
    between them), so an own entry outside them was claimed by an earlier attempt of this
    part, or by a step whose reply was lost and was sent again (taking the next range). The
    consumer's own rows are normally none but this loop's, which lie in its ranges."""
    starts = [stream_id_key(start) for start, _ in ranges]
    for page in pending_pages(client, unit.stream, unit.group, OWN_PAGE, unit.consumer):
        for row in page:
            if row[ID] not in owned and not _in_ranges(row[ID].decode(), starts, ranges):
                owned[row[ID]] = row


def _in_ranges(entry_id: str, starts: list[tuple[int, int]],
               ranges: list[tuple[str, str]]) -> bool:
    """Whether `entry_id` lies in one of `ranges` ((inclusive start, exclusive end; ``0-0``:
    no end), ascending; `starts`: their starts as keys)."""
    key = stream_id_key(entry_id)
    i = bisect_right(starts, key) - 1
    if i < 0:
        return False
    end = ranges[i][1]
    return end == END_CURSOR or key < stream_id_key(end)


def _sent(first: FirstStep) -> ClaimBatch:
    """A step sent ahead: its batch, or the error its stream or group answered, raised."""
    if isinstance(first.batch, Exception):
        raise first.batch
    return first.batch


def claim_step(client: redis.Redis, params: JobParams, unit: Unit, cursor: str,
               ahead: int) -> ClaimBatch:
    """One claim step from `cursor`: XAUTOCLAIM (every idle entry), or under a backoff
    schedule the script that claims only the due ones, with the fields of up to `ahead`
    stream entries from `cursor` read behind it (the loop passes 0 after a step that
    claimed fewer than half the rows it read: the due entries are spread out, and reading
    the ones between them would be waste)."""
    if params.backoff or unit.cursor is not None:
        return claim_due_batch(client, unit.stream, unit.group, unit.consumer,
                               params.min_idle_ms, cursor, params.count, schedule_args(params),
                               ahead, unit.cursor)
    return claim_batch(client, unit.stream, unit.group, unit.consumer, params.min_idle_ms,
                       cursor, params.count)


def examined(batch: ClaimBatch) -> list[PendingRow]:
    """The step's PEL rows as found that its claim examined: those of the entries it claimed
    or dropped as deleted. (The read may reach past the claim's end when XAUTOCLAIM ran out
    of attempts: those rows belong to the next step.)"""
    taken = set(batch.ids)
    taken.update(batch.deleted)
    return [row for entry_id, row in batch.before.items() if entry_id in taken]


def left_reads(client: redis.Redis, params: JobParams,
               units: list[tuple[Unit, PelHistogram]]) -> None:
    """Count the PEL rows other consumers own once each unit's loop is done: what it did not
    claim (usually none, a read of an empty PEL). The units' first pages go in one pipeline;
    a unit that vanished meanwhile is left out."""
    replies = each(client, [pending_command(u.stream, u.group, "-", "+", OWN_PAGE)
                            for u, _ in units])
    for (unit, histogram), page in zip(units, replies, strict=True):
        if isinstance(page, Exception):
            if unit_vanished(page):
                continue
            with redis_errors(params.redis, unit.stream, unit.group):
                raise page
        _add_left(unit, histogram, page)  # type: ignore[arg-type]
        if len(page) == OWN_PAGE:  # type: ignore[arg-type]
            with redis_errors(params.redis, unit.stream, unit.group):
                for more in pending_pages(client, unit.stream, unit.group, OWN_PAGE,
                                          start="(" + as_str(page[-1][ID])):  # type: ignore[index]
                    _add_left(unit, histogram, more)


def _add_left(unit: Unit, histogram: PelHistogram, page: list[PendingRow]) -> None:
    mine = unit.consumer.encode()
    histogram.add([row for row in page if row[OWNER] != mine])


def _read_own_range(client: redis.Redis, unit: Unit, batch: ClaimBatch,
                    cursor: str, owned: dict[bytes, PendingRow]) -> dict[bytes, int]:
    """Read the job consumer's entries in the step's range, only when the step found an own
    entry at or after its cursor (or a claimed entry lacks its row in the range read, or a
    6.2 nil entry could not be matched to its ID): adds those the step did not claim to
    `owned` (the hand-over fetches their fields and reports those gone as deleted); returns
    the delivery counts of the claimed ones (empty without a read)."""
    missing = [i for i in batch.ids if i not in batch.before]
    if not missing and batch.own_first is None and not batch.unresolved and batch.own_known:
        return {}
    end = "+" if batch.next_cursor == END_CURSOR else "(" + batch.next_cursor
    claimed_now = set(batch.ids) | set(batch.deleted)
    counts: dict[bytes, int] = {}
    for page in pending_pages(client, unit.stream, unit.group, OWN_PAGE, unit.consumer,
                              start=cursor, end=end):
        for row in page:
            if row[ID] in claimed_now:
                counts[row[ID]] = int(row[COUNT])
            elif row[ID] not in owned:
                owned[row[ID]] = row
    return counts


def _claimed(unit: Unit, batch: ClaimBatch, counts: dict[bytes, int]) -> Claimed:
    """The step's claimed entries, then those deleted upstream (no fields). A delivery count
    is the PEL's after this claim plus what a requeued copy carries."""
    ids = batch.ids + batch.deleted
    n_deleted = len(batch.deleted)
    before = [batch.before.get(i) for i in ids]
    fields = [*field_pairs(batch.flats), *([None] * n_deleted)]
    pel_counts = [b[COUNT] + 1 if b else counts.get(i) for i, b in zip(ids, before, strict=True)]
    saturate_all(pel_counts)  # a count at the maximum (XNACK FATAL) or wrapped past it
    names = {owner: shown(owner) for owner in {b[OWNER] for b in before if b}}
    claimed = Claimed.of_unit(
        unit, [i.decode() for i in ids], [False] * len(batch.ids) + [True] * n_deleted,
        [names[b[OWNER]] if b else None for b in before],
        [b[IDLE] if b else None for b in before], fields, pel_counts)
    claimed.add_carried(carrying(batch.flats))
    return claimed


def _owned(unit: Unit, rows: list[PendingRow]) -> Claimed:
    """Entries the job consumer owned without this loop's claim: no previous owner or idle
    time known, no fields (fetched at hand-over), the PEL's delivery count."""
    n = len(rows)
    counts: list[int | None] = [int(r[COUNT]) for r in rows]
    saturate_all(counts)
    return Claimed.of_unit(unit, [r[ID].decode() for r in rows], [False] * n, [None] * n,
                           [None] * n, [None] * n, counts)
