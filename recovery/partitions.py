"""Where Spark partitions meet Redis: the mapInArrow functions of a run.

Each function factory takes the frozen :class:`JobParams` and returns the function Spark
runs per partition. One Redis client per partition; the driver never sees messages.

- ``claim_partition``: UNIT rows -> CLAIMED rows, XAUTOCLAIM cursor loops (a side effect:
  the driver materialises its output exactly once);
- ``pending_partition``: UNIT rows -> PENDING rows, the job consumer's PEL after the claim;
- ``apply_partition``: ROUTED rows -> REPORT rows, dead-letter moves, handler and acks.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from itertools import accumulate, chain
from typing import Any

import pyarrow as pa
import redis

from recovery.apply import apply_batch
from recovery.config import JobParams
from recovery.errors import StreamUnitError
from recovery.faults import maybe_fail
from recovery.redis_conn import connect, redis_errors
from recovery.schemas import CLAIMED, PENDING, UNIT, arrow
from recovery.streams import (
    COUNT,
    END_CURSOR,
    ID,
    IDLE,
    OWNER,
    ClaimBatch,
    claim_batch,
    pending_pages,
)
from recovery.throttle import Throttle

log = logging.getLogger(__name__)

ArrowFn = Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]
UnitFn = Callable[[redis.Redis, dict[str, Any]], Iterator[pa.RecordBatch]]
PENDING_PAGE = 10_000
PROGRESS_EVERY = 100_000
CLAIMED_ARROW = arrow(CLAIMED)
PENDING_ARROW = arrow(PENDING)
UNIT_ARROW = arrow(UNIT)
FIELDS_ARROW = CLAIMED_ARROW.field("fields").type


def units_of_parts(by_part: list[list[dict[str, Any]]]) -> ArrowFn:
    """``spark.range(n, numPartitions=n)`` batches -> UNIT batches: part p's units, as rows
    (each partition holds one part number, so each part's units land in its own task)."""

    def units(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for part in batch.column(0).to_pylist():
                if by_part[part]:
                    yield pa.RecordBatch.from_pylist(by_part[part], schema=UNIT_ARROW)

    return units


def unit_rows(batches: Iterator[pa.RecordBatch]) -> Iterator[dict[str, Any]]:
    for batch in batches:
        yield from batch.to_pylist()


class PartitionClient:
    """Opens the partition's one client on first use (empty partitions open none)."""

    def __init__(self, params: JobParams) -> None:
        self.params = params
        self._client: redis.Redis | None = None

    def get(self) -> redis.Redis:
        if self._client is None:
            with redis_errors(self.params.redis):
                self._client = connect(self.params.redis)
        return self._client

    def close(self) -> None:
        if self._client is not None:
            self._client.close()


def per_unit(params: JobParams, make_unit_fn: Callable[[], UnitFn]) -> ArrowFn:
    """A partition function that runs `unit_fn(client, unit)` for each UNIT row.

    One client per partition (opened on first use, closed at the end); `make_unit_fn` is
    called once per partition, for per-partition state such as a throttle. A unit whose
    stream or group vanished mid-run ends quietly; other units go on.
    """

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        client = PartitionClient(params)
        unit_fn = make_unit_fn()
        try:
            for unit in unit_rows(batches):
                yield from skip_vanished(unit, unit_fn(client.get(), unit))
        finally:
            client.close()

    return run


def claim_partition(params: JobParams) -> ArrowFn:
    """UNIT batches -> CLAIMED batches: claim every idle entry of each unit."""

    def make() -> UnitFn:
        throttle = Throttle(params.max_entries_per_s_per_partition)
        return lambda client, unit: _claim_unit(client, params, unit, throttle)

    return per_unit(params, make)


def _claim_unit(client: redis.Redis, params: JobParams, unit: dict[str, Any],
                throttle: Throttle) -> Iterator[pa.RecordBatch]:
    """XAUTOCLAIM from 0-0, passing the cursor back unchanged, until it returns 0-0."""
    stream, group, consumer = unit["stream"], unit["group"], unit["consumer"]
    cursor, step, claimed = "0-0", 0, 0
    while True:
        with redis_errors(params.redis, stream, group):
            batch = claim_batch(client, stream, group, consumer, params.min_idle_ms, cursor,
                                params.count)
        step += 1
        seen = len(batch.ids) + len(batch.deleted)
        if seen:
            yield _claimed_batch(unit, batch)
        claimed, before = claimed + seen, claimed
        if claimed // PROGRESS_EVERY > before // PROGRESS_EVERY:
            log.info("claim %s / %s: %d entries so far", stream, group, claimed)
        maybe_fail("claim", step)
        throttle.take(seen)
        cursor = batch.next_cursor
        if cursor == END_CURSOR:
            return


def _claimed_batch(unit: dict[str, Any], batch: ClaimBatch) -> pa.RecordBatch:
    """Arrow columns built directly (flat name/value arrays plus offsets): fast and exact."""
    ids = batch.ids + batch.deleted
    flat = list(chain.from_iterable(batch.flats))
    offsets = [0, *accumulate(len(f) // 2 for f in batch.flats)]
    struct = pa.StructArray.from_arrays(
        [pa.array(flat[0::2], pa.binary()), pa.array(flat[1::2], pa.binary())],
        fields=list(FIELDS_ARROW.value_type),
    )
    fields_col = pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), struct,
                                          type=FIELDS_ARROW)
    n_deleted = len(batch.deleted)
    if n_deleted:
        fields_col = pa.concat_arrays([fields_col, pa.nulls(n_deleted, FIELDS_ARROW)])
    before = [batch.before.get(i) for i in ids]
    columns = [
        *_unit_columns(unit, len(ids)),
        pa.array(ids, pa.string()),
        pa.array([False] * len(batch.ids) + [True] * n_deleted, pa.bool_()),
        pa.array([b[OWNER] if b else None for b in before], pa.string()),
        pa.array([b[IDLE] if b else None for b in before], pa.int64()),
        fields_col,
    ]
    return pa.RecordBatch.from_arrays(columns, schema=CLAIMED_ARROW)


def pending_partition(params: JobParams) -> ArrowFn:
    """UNIT batches -> PENDING batches: every entry the unit's job consumer owns now."""
    return per_unit(params, lambda: lambda client, unit: _pending_unit(client, params, unit))


def _pending_unit(client: redis.Redis, params: JobParams, unit: dict[str, Any]
                  ) -> Iterator[pa.RecordBatch]:
    stream, group, consumer = unit["stream"], unit["group"], unit["consumer"]
    with redis_errors(params.redis, stream, group):
        for rows in pending_pages(client, stream, group, PENDING_PAGE, consumer):
            yield pa.RecordBatch.from_arrays([
                *_unit_columns(unit, len(rows)),
                pa.array([r[ID] for r in rows], pa.string()),
                pa.array([r[COUNT] for r in rows], pa.int64()),
            ], schema=PENDING_ARROW)


def _unit_columns(unit: dict[str, Any], n: int) -> list[pa.Array]:
    """The stream, group and consumer columns of `n` rows of one unit."""
    return [pa.array([unit[k]] * n, pa.string()) for k in ("stream", "group", "consumer")]


def skip_vanished(unit: dict[str, Any], batches: Iterator[pa.RecordBatch]
                   ) -> Iterator[pa.RecordBatch]:
    """Pass `batches` on; a unit whose stream or group vanished mid-run ends quietly.

    Its entries already claimed are still reported; other units go on.
    """
    try:
        yield from batches
    except StreamUnitError as exc:
        log.warning("stopped %s / %s early: %s", unit["stream"], unit["group"], exc)


def apply_partition(params: JobParams) -> ArrowFn:
    """ROUTED batches -> REPORT batches: dead-letter, handle and ack, then report."""

    def apply(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        client = PartitionClient(params)
        try:
            for step, batch in enumerate(batches, start=1):
                with redis_errors(params.redis):
                    report = apply_batch(client.get(), params, batch)
                maybe_fail("apply", step)  # after the side effects: the worst moment
                yield report
        finally:
            client.close()

    return apply
