"""Where Spark partitions meet Redis: the mapInArrow functions of a run.

Each function factory takes the frozen :class:`JobParams` and returns the function Spark
runs per partition. One Redis client per partition; the driver never sees messages.

Claim tasks take UNIT rows (XAUTOCLAIM loops) or, in a run that applies a plan, PLANNED rows
(claims by ID): ``unit_claims`` dispatches.

- ``claim_partition``: UNIT rows -> PACKED rows of CLAIMED batches, XAUTOCLAIM cursor loops
  (a side effect: the driver materialises its output exactly once), and each unit's PEL
  histogram and its entries not due (under a backoff schedule) as a note;
- ``apply_partition``: PACKED rows of CLAIMED batches -> REPORT rows: route, dead-letter
  moves, handler and acks;
- ``recover_partition``: UNIT rows -> REPORT rows, all in one pass: each claim step is
  handed over as soon as it is claimed (journaled first where Spark may retry a task).

The last two are report passes (``recovery.executor.tally.PassMaker``): made per task with its
Tally, and run by ``recovery.report.run_report.write_pass``, which counts their rows.
"""

from __future__ import annotations

import contextlib
import gc
import logging
from collections.abc import Callable, Iterable, Iterator
from functools import partial
from itertools import chain
from typing import TypeVar

import pyarrow as pa

from recovery.errors import StreamUnitError
from recovery.executor.claim.backoff import NotDue
from recovery.executor.claim.by_plan import plan_steps, planned_units
from recovery.executor.claim.first_steps import FirstStep, with_first_steps
from recovery.executor.claim.gather import gathered
from recovery.executor.claim.journaled import TaskJournal
from recovery.executor.claim.left_counts import LeftCounts, gone_actions
from recovery.executor.claim.loop import ClaimStep, claim_steps
from recovery.executor.claim.throttle import Throttle
from recovery.executor.claimed import Claimed
from recovery.executor.faults import maybe_fail
from recovery.executor.handover.apply import apply_batch
from recovery.executor.handover.lease import LEASE_ROWS
from recovery.executor.handover.modes import mode_of
from recovery.executor.histogram import PelHistogram
from recovery.executor.packing import ArrowFn, note_row, packed_rows, unpacked
from recovery.executor.tally import PassMaker, Tally, note
from recovery.params import JobParams, RedisParams, Unit
from recovery.redis_io.redis_conn import RedisConn

log = logging.getLogger(__name__)

YOUNG_GC_THRESHOLD = 50_000  # allocations between two young collections in a task (Python: 700)
UnitFn = Callable[[RedisConn, Unit], Iterator[pa.RecordBatch]]


def unit_rows(batches: Iterator[pa.RecordBatch]) -> Iterator[Unit]:
    """The Units of UNIT batches."""
    for batch in batches:
        for row in batch.to_pylist():
            yield Unit(row["stream"], row["group"], row["consumer"], row.get("cursor"))


class PartitionConn:
    """Opens the partition's one connection on first use (empty partitions open none)."""

    def __init__(self, params: RedisParams) -> None:
        self.params = params
        self._conn: RedisConn | None = None

    def get(self) -> RedisConn:
        """The partition's connection, opened now if it is not yet."""
        if self._conn is None:
            self._conn = RedisConn.open(self.params)
        return self._conn

    def close(self) -> None:
        """Close the connection, if one was opened."""
        if self._conn is not None:
            self._conn.close()


def per_unit(params: JobParams, make_unit_fn: Callable[[], UnitFn]) -> ArrowFn:
    """A partition function that runs `unit_fn(conn, unit)` for each UNIT row.

    One connection per partition (opened on first use, closed at the end); `make_unit_fn` is
    called once per partition, for per-partition state such as a throttle. A unit whose
    stream or group vanished mid-run ends quietly; other units go on.
    """

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        conn = PartitionConn(params.redis)
        unit_fn = make_unit_fn()
        try:
            with young_collections_rarer():
                for unit in unit_rows(batches):
                    yield from skip_vanished(unit, unit_fn(conn.get(), unit))
        finally:
            conn.close()

    return run


@contextlib.contextmanager
def young_collections_rarer(threshold: int = YOUNG_GC_THRESHOLD) -> Iterator[None]:
    """Run the cyclic garbage collector's youngest generation every `threshold` allocations
    instead of Python's 700, then restore the setting (workers are reused across tasks).

    A claim step holds about a dozen container objects per entry (reply lists, field pairs,
    messages) until its hand-over ends. With the default, they are scanned and promoted over
    and over, and the promotions trigger full collections of the worker's whole heap
    (pyarrow, pyspark). Reference counting still frees them as before; only garbage in
    cycles, which this code does not make, waits longer (the CPU it saves:
    docs/PERFORMANCE.md).
    """
    before = gc.get_threshold()
    gc.set_threshold(threshold, *before[1:])
    try:
        yield
    finally:
        gc.set_threshold(*before)


def coalesced(fn: ArrowFn, rows: int) -> ArrowFn:
    """`fn` with its output batches joined into batches of at least `rows` rows (the last one
    may be smaller; no empty ones). Spark pays per batch it carries between Python and the
    JVM: writing a thousand one-row batches costs Python alone ~0.5 s, one batch of the same
    thousand rows ~2 ms."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        pending: list[pa.RecordBatch] = []
        held = 0
        for batch in fn(batches):
            pending.append(batch)
            held += batch.num_rows
            if held >= rows:
                yield from _joined(pending)
                pending, held = [], 0
        if pending:
            yield from _joined(pending)

    return run


def _joined(batches: list[pa.RecordBatch]) -> list[pa.RecordBatch]:
    """One batch of all `batches`' rows, or none when they hold no rows."""
    return pa.Table.from_batches(batches).combine_chunks().to_batches()


def claim_partition(params: JobParams, histograms: bool = False) -> ArrowFn:
    """UNIT batches -> PACKED rows: claim every idle entry of each unit; each row packs up
    to PACK_ROWS entries of one XAUTOCLAIM step (a CLAIMED batch). With `histograms`, each
    unit's PEL histogram, counted from the claim steps' own reads as in one pass, follows
    its entries as a note for the hand-over's tally (no separate pass over the PEL)."""

    def claim_packed(conn: RedisConn, unit: Unit, claim: UnitClaim
                     ) -> Iterator[pa.RecordBatch]:
        pel = PelHistogram() if histograms else None
        waiting = NotDue() if params.backoff else None
        for step in claim(conn, pel, waiting, True):
            yield from packed_rows(step.claimed.to_arrow())
        if pel is not None or waiting is not None:
            yield note_row(note(pel.row(unit.stream, unit.group) if pel else None,
                                (unit.stream, unit.group, waiting) if waiting else None))

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        conn = PartitionConn(params.redis)
        try:
            with young_collections_rarer():
                for unit, claim in unit_claims(params, batches):
                    yield from skip_vanished(unit, claim_packed(conn.get(), unit, claim))
        finally:
            conn.close()

    return run


# How one unit is claimed: (connection, PEL histogram or None, its count of entries not due
# under a backoff schedule or None, count_left) -> its claim steps.
UnitClaim = Callable[[RedisConn, PelHistogram | None, NotDue | None, bool],
                     Iterator[ClaimStep]]


def unit_claims(params: JobParams, batches: Iterator[pa.RecordBatch],
                conn: Callable[[], RedisConn] | None = None
                ) -> Iterator[tuple[Unit, UnitClaim]]:
    """Each unit of a claim task's input and how to claim it, with one throttle per task:
    its XAUTOCLAIM loop (UNIT rows, ``recovery.executor.claim.loop``; with `conn`, the
    partition's connection getter, first steps sent ahead in rounds:
    ``recovery.executor.claim.first_steps``; the parts of split units first, claimed through
    their shared cursor) or, in a run that applies a plan, its planned entries
    by ID (PLANNED rows, ``recovery.executor.claim.by_plan``; no histogram: such a run reads
    the PELs in a pass of their own)."""
    throttle = Throttle(params.max_entries_per_s_per_partition)
    if params.planned:
        for unit, planned in planned_units(batches):
            yield unit, lambda conn, _pel, _due, _left, u=unit, p=planned: plan_steps(  # type: ignore[misc]
                conn, params, u, p, throttle)
        return
    units = list(unit_rows(batches))
    whole = [unit for unit in units if unit.cursor is None]
    firsts = with_first_steps(conn, params, whole) if conn is not None else \
        ((unit, None) for unit in whole)
    # Parts of split units first (a shared claim's steps are never sent ahead).
    for unit, first in chain(((u, None) for u in units if u.cursor is not None), firsts):
        yield unit, partial(_idle_claim, params, unit, throttle, first)


def _idle_claim(params: JobParams, unit: Unit, throttle: Throttle, first: FirstStep | None,
                conn: RedisConn, pel: PelHistogram | None, waiting: NotDue | None,
                count_left: bool) -> Iterator[ClaimStep]:
    return claim_steps(conn, params, unit, throttle, pel, count_left=count_left,
                       waiting=waiting, first=first)


def recover_partition(params: JobParams, histograms: bool = False,
                      journal_prefix: str | None = None, rows: int = LEASE_ROWS) -> PassMaker:
    """UNIT batches -> REPORT batches: claim each unit step by step and hand the steps over as
    they come, consecutive small ones gathered into hand-overs of up to `rows` entries
    (``recovery.executor.claim.gather``), each claim serving as the first lease read. Nothing is
    materialised: without `journal_prefix` a retried task could not report what its failed
    attempt did (for runs without task retries); with it, each step is journaled in Redis
    first and a retried attempt reports from the journal (``recovery.executor.claim.journaled``).
    With `histograms`, the task's tally also carries each unit's PEL histogram, counted from
    the claim steps' own reads (no separate pass over the PEL)."""

    def make(tally: Tally) -> ArrowFn:
        def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            conn = PartitionConn(params.redis)
            journal = TaskJournal(journal_prefix) if journal_prefix is not None else None
            mode = mode_of(params.reprocess_mode)
            left = LeftCounts(gone_actions(mode.done, mode.stays_pending)) \
                if histograms else None

            def unit_steps(unit: Unit, claim: UnitClaim) -> Iterator[ClaimStep]:
                pel = tally.histogram(unit.stream, unit.group) if histograms else None
                waiting = tally.waiting(unit.stream, unit.group) if params.backoff else None
                steps = claim(conn.get(), pel, waiting, False)
                if journal is not None:
                    steps = journal.steps(conn.get(), unit, steps)
                steps = skip_vanished(unit, steps)
                # A split unit's PEL is read for what its claim left once every part is done
                # (on the driver: recovery.driver.split).
                shared = unit.cursor is not None
                return left.tracked(unit, pel, steps, shared) if left and pel else steps

            steps = gathered((s for unit, claim in unit_claims(params, batches, conn.get)
                              for s in unit_steps(unit, claim)), rows)
            if journal is not None:
                steps = journal.recorded(conn.get(), steps)
            done = (lambda report: journal.done(conn.get(), report)) if journal else None
            try:
                with young_collections_rarer():
                    reports = applied(conn.get, params, left.sent(steps) if left else steps,
                                      done)
                    for report in journal.amended(reports) if journal else reports:
                        if left is not None:
                            left.handed(conn.get(), report)
                        yield report
                    if left is not None:
                        left.rest(conn.get())
            finally:
                conn.close()

        return run

    return make


def applied(get_conn: Callable[[], RedisConn], params: JobParams,
            steps: Iterable[ClaimStep],
            done: Callable[[pa.RecordBatch], None] | None = None) -> Iterator[pa.RecordBatch]:
    """REPORT batches of claimed `steps` (each with when its lease was last read, or None):
    route, dead-letter, handle and ack one step at a time; `done`, if given, gets each
    step's report before it is passed on."""
    for step, item in enumerate(steps, start=1):
        conn = get_conn()
        with conn.errors():
            report = apply_batch(conn.client, params, item.claimed, item.sent_at)
        maybe_fail("apply", step)  # after the side effects: the worst moment
        if done is not None:
            done(report)
        yield report


T = TypeVar("T")


def skip_vanished(unit: Unit, items: Iterator[T]) -> Iterator[T]:
    """Pass `items` (a unit's claim steps or REPORT batches) on; a unit whose stream or group
    vanished mid-run ends quietly.

    Its entries already claimed are still reported; other units go on.
    """
    try:
        yield from items
    except StreamUnitError as exc:
        log.warning("stopped %s / %s early: %s", unit.stream, unit.group, exc)


def apply_partition(params: JobParams, rows: int) -> PassMaker:
    """PACKED rows of CLAIMED batches -> REPORT batches: route, dead-letter, handle and ack
    in steps of `rows` entries (in claim order), then report. The claim stage's histogram
    notes go into the task's tally."""

    def make(tally: Tally) -> ArrowFn:
        def apply(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            conn = PartitionConn(params.redis)
            steps = unpacked(batches, rows, tally.add_note)
            try:
                with young_collections_rarer():
                    yield from applied(conn.get, params,
                                       (ClaimStep(Claimed.from_arrow(batch), None)
                                        for batch in steps))
            finally:
                conn.close()

        return apply

    return make
