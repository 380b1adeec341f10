"""Read-only passes over the PEL on executors: group health histograms and the dry-run plan.

Nothing here writes to Redis: only XPENDING (extended form) and XRANGE. Delivery-count and
idle-age buckets have fixed labels so that runs compare.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import redis

from recovery.config import JobParams
from recovery.partitions import ArrowFn, per_unit
from recovery.redis_conn import redis_errors
from recovery.schemas import (
    ACTION_DELETED,
    PEL_HISTOGRAM,
    PLAN_DEAD_LETTER,
    PLAN_REPROCESS,
    REPORT,
    arrow,
)
from recovery.streams import PendingEntry, fetch_entries, pending_range

PAGE = 10_000
# (exclusive upper bound, label)
DELIVERY_BUCKETS = ((2, "1"), (3, "2"), (4, "3"), (6, "4-5"), (11, "6-10"), (101, "11-100"))
IDLE_BUCKETS_MS = ((60_000, "<1m"), (600_000, "1m-10m"), (3_600_000, "10m-1h"),
                   (86_400_000, "1h-1d"), (604_800_000, "1d-7d"))
HISTOGRAM_ARROW = arrow(PEL_HISTOGRAM)
REPORT_ARROW = arrow(REPORT)


def bucket(value: int, buckets: tuple[tuple[int, str], ...], overflow: str) -> str:
    """The label of the first bucket with `value` below its upper bound, else `overflow`."""
    for upper, label in buckets:
        if value < upper:
            return label
    return overflow


def pel_pages(client: redis.Redis, stream: str, group: str, min_idle_ms: int | None = None
              ) -> Iterator[list[PendingEntry]]:
    """The group's whole PEL in ID order, `PAGE` rows per XPENDING call."""
    start = "-"
    while True:
        rows = pending_range(client, stream, group, start, "+", PAGE, min_idle_ms=min_idle_ms)
        if rows:
            yield rows
        if len(rows) < PAGE:
            return
        start = "(" + rows[-1].id


def histogram_partition(params: JobParams) -> ArrowFn:
    """UNIT batches -> PEL_HISTOGRAM batches: one row of counts per unit."""
    return per_unit(params, lambda: lambda client, unit: _histogram_unit(client, params, unit))


def _histogram_unit(client: redis.Redis, params: JobParams, unit: dict[str, Any]
                    ) -> Iterator[pa.RecordBatch]:
    deliveries: Counter[str] = Counter()
    ages: Counter[str] = Counter()
    oldest: int | None = None
    with redis_errors(params.redis, unit["stream"], unit["group"]):
        for page in pel_pages(client, unit["stream"], unit["group"]):
            for row in page:
                deliveries[bucket(row.delivery_count, DELIVERY_BUCKETS, ">100")] += 1
                ages[bucket(row.idle_ms, IDLE_BUCKETS_MS, ">7d")] += 1
                oldest = row.idle_ms if oldest is None else max(oldest, row.idle_ms)
    yield pa.RecordBatch.from_pylist(
        [{"stream": unit["stream"], "group": unit["group"], "deliveries": list(deliveries.items()),
          "idle_ages": list(ages.items()), "oldest_idle_ms": oldest}],
        schema=HISTOGRAM_ARROW)


def plan_partition(params: JobParams) -> ArrowFn:
    """UNIT batches -> REPORT batches of what a real run would do (dry run, no claim)."""
    return per_unit(params, lambda: lambda client, unit: _plan_unit(client, params, unit))


def _plan_unit(client: redis.Redis, params: JobParams, unit: dict[str, Any]
               ) -> Iterator[pa.RecordBatch]:
    stream, group = unit["stream"], unit["group"]
    with redis_errors(params.redis, stream, group):
        for page in pel_pages(client, stream, group, min_idle_ms=params.min_idle_ms):
            exists = fetch_entries(client, stream, [r.id for r in page])
            rows = [_plan_row(params, stream, group, r, exists[r.id] is not None) for r in page]
            yield pa.RecordBatch.from_pylist(rows, schema=REPORT_ARROW)


def _plan_row(params: JobParams, stream: str, group: str, entry: PendingEntry, exists: bool
              ) -> dict[str, Any]:
    """A real run's claim would add one delivery: route on that count, as the run would."""
    count = entry.delivery_count + 1
    if not exists:
        action, reason = ACTION_DELETED, "entry deleted from the stream upstream"
    elif count > params.max_deliveries:
        action, reason = PLAN_DEAD_LETTER, "max-deliveries-exceeded"
    else:
        action, reason = PLAN_REPROCESS, None
    return {"run_id": params.run_id, "stream": stream, "group": group, "id": entry.id,
            "previous_consumer": entry.consumer, "delivery_count": count,
            "idle_ms": entry.idle_ms, "action": action, "reason": reason, "error": None,
            "dead_letter_id": None}
