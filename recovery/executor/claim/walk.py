"""One claim loop's walk over a unit's PEL, step by step: each step claimed (by the caller's
stepper: XAUTOCLAIM, the backoff script, a shared cursor's step), its own-entry read, its
counts, its entries as a ClaimStep; the entries taken back at the end
(``recovery.executor.claim.loop`` has the whole story of the loop).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from typing import NamedTuple

import redis

from recovery.counts import saturate_all
from recovery.executor.claim.backoff import NotDue
from recovery.executor.claim.first_steps import FirstStep
from recovery.executor.claim.throttle import Throttle
from recovery.executor.claimed import Claimed, carrying, field_pairs
from recovery.executor.faults import maybe_fail
from recovery.executor.histogram import PelHistogram
from recovery.params import JobParams, Unit
from recovery.redis_io.autoclaim import ClaimBatch
from recovery.redis_io.claim_due import taken_range
from recovery.redis_io.redis_conn import RedisConn
from recovery.redis_io.streams import (
    COUNT,
    END_CURSOR,
    ID,
    IDLE,
    OWNER,
    PendingRow,
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
    `joins`: how many claim steps it holds (``recovery.executor.claim.gather``)."""

    claimed: Claimed
    sent_at: float | None
    joins: int = 1


# One claim step from a cursor: (cursor, ahead) -> its batch (``claim_step``).
Stepper = Callable[[str, int], ClaimBatch]


class Walk:
    """One claim loop's state over one or more walks of its unit's PEL: the entries taken
    back, the steps and entries so far, the counts."""

    def __init__(self, conn: RedisConn, params: JobParams, unit: Unit, throttle: Throttle,
                 histogram: PelHistogram | None, waiting: NotDue | None) -> None:
        self.conn, self.params, self.unit, self.throttle = conn, params, unit, throttle
        self.histogram, self.waiting = histogram, waiting
        self.owned: dict[bytes, PendingRow] = {}  # taken back: the consumer's, not claimed here
        self.step, self.claimed = 0, 0

    def steps(self, stepper: Stepper, cursor: str, first: FirstStep | None = None,
              end: str = "+") -> Iterator[ClaimStep]:
        """Claim steps from `cursor` until a step's read comes back short; own entries are
        looked for up to `end` (an ID, inclusive, or ``+``). A step that chose its own range
        (``ClaimBatch.taken``) starts where it says."""
        unit, params = self.unit, self.params
        ahead = params.count  # entries whose fields a backoff step reads ahead (claim_step)
        while True:
            sent_at = time.monotonic() if first is None else first.sent_at
            with self.conn.errors(unit.stream, unit.group):
                batch = _sent(first) if first is not None else stepper(cursor, ahead)
                first = None
                if batch.taken is not None:
                    cursor = taken_range(batch.taken)[0]
                counts = _read_own_range(self.conn.client, unit, batch, cursor, self.owned, end)
            self.step += 1
            self._count(batch)
            seen = len(batch.ids) + len(batch.deleted)
            ahead = params.count if 2 * seen >= len(batch.before) else 0
            if seen:
                yield ClaimStep(_claimed(unit, batch, counts), sent_at)
            self.claimed, before = self.claimed + seen, self.claimed
            if self.claimed // PROGRESS_EVERY > before // PROGRESS_EVERY:
                log.info("claim %s / %s: %d entries so far", unit.stream, unit.group,
                         self.claimed)
            maybe_fail("claim", self.step)
            self.throttle.take(seen)
            cursor = batch.next_cursor
            if cursor == END_CURSOR:
                return

    def _count(self, batch: ClaimBatch) -> None:
        """Count a step's PEL rows as found and its entries not due."""
        if self.histogram is not None:
            self.histogram.add_claimed(examined(batch))
            if batch.left is not None:
                self.histogram.add_left(batch.left)
        if self.waiting is not None and batch.not_due:
            self.waiting.add(batch.not_due, batch.due_in_ms, int(time.time() * 1000))

    def taken_back(self) -> Iterator[ClaimStep]:
        """The entries the walks took back, as one last step (none when there are none)."""
        if not self.owned:
            return
        unit = self.unit
        log.info("claim %s / %s: %d entries taken back (claimed by an earlier attempt or "
                 "through a lost reply)", unit.stream, unit.group, len(self.owned))
        rows = sorted(self.owned.values(), key=lambda r: stream_id_key(r[ID].decode()))
        if self.histogram is not None:
            self.histogram.add_claimed(rows, loose=True)
        yield ClaimStep(_owned(unit, rows), None)


def _sent(first: FirstStep) -> ClaimBatch:
    """A step sent ahead: its batch, or the error its stream or group answered, raised."""
    if isinstance(first.batch, Exception):
        raise first.batch
    return first.batch


def examined(batch: ClaimBatch) -> list[PendingRow]:
    """The step's PEL rows as found that its claim examined: those of the entries it claimed
    or dropped as deleted. (The read may reach past the claim's end when XAUTOCLAIM ran out
    of attempts: those rows belong to the next step.)"""
    taken = set(batch.ids)
    taken.update(batch.deleted)
    return [row for entry_id, row in batch.before.items() if entry_id in taken]


def _read_own_range(client: redis.Redis, unit: Unit, batch: ClaimBatch,
                    cursor: str, owned: dict[bytes, PendingRow], last: str = "+"
                    ) -> dict[bytes, int]:
    """Read the job consumer's entries in the step's range, only when the step found an own
    entry at or after its cursor (or a claimed entry lacks its row in the range read, or a
    6.2 nil entry could not be matched to its ID): adds those the step did not claim to
    `owned` (the hand-over fetches their fields and reports those gone as deleted; `last`:
    the walk's last ID, inclusive, or ``+``); returns
    the delivery counts of the claimed ones (empty without a read)."""
    missing = [i for i in batch.ids if i not in batch.before]
    if not missing and batch.own_first is None and not batch.unresolved and batch.own_known:
        return {}
    end = last if batch.next_cursor == END_CURSOR else "(" + batch.next_cursor
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
