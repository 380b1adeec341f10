"""Read-only passes over the PEL on executors: group health histograms and the dry-run plan.

Nothing here writes to Redis: only XPENDING (extended form) and XRANGE. Delivery-count and
idle-age buckets have fixed labels so that runs compare.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import redis

from recovery.config import JobParams
from recovery.partitions import ArrowFn, coalesced, per_unit
from recovery.redis_conn import redis_errors
from recovery.schemas import (
    ACTION_DELETED,
    PEL_HISTOGRAM,
    PLAN_DEAD_LETTER,
    PLAN_REPROCESS,
    REPORT,
    arrow,
)
from recovery.streams import (
    COUNT,
    ID,
    IDLE,
    OWNER,
    PendingRow,
    fetch_entries,
    pending_pages,
    shown,
)

PAGE = 10_000
HISTOGRAM_ROWS = 1000  # units per output batch of the histogram pass (one row each)
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


def histogram_partition(params: JobParams) -> ArrowFn:
    """UNIT batches -> PEL_HISTOGRAM batches: one row of counts per unit, up to
    ``HISTOGRAM_ROWS`` rows per batch."""
    return coalesced(
        per_unit(params, lambda: lambda client, unit: _histogram_unit(client, params, unit)),
        HISTOGRAM_ROWS)


def _histogram_unit(client: redis.Redis, params: JobParams, unit: dict[str, Any]
                    ) -> Iterator[pa.RecordBatch]:
    counts: Counter[int] = Counter()
    ages: Counter[str] = Counter()
    oldest: int | None = None
    idle_bounds = [upper for upper, _ in IDLE_BUCKETS_MS]
    idle_labels = [label for _, label in IDLE_BUCKETS_MS] + [">7d"]
    with redis_errors(params.redis, unit["stream"], unit["group"]):
        for page in pending_pages(client, unit["stream"], unit["group"], PAGE):
            counts.update(r[COUNT] for r in page)
            idles = [r[IDLE] for r in page]
            ages.update(idle_labels[bisect_right(idle_bounds, i)] for i in idles)
            oldest = max(idles) if oldest is None else max(oldest, max(idles))
    deliveries: Counter[str] = Counter()
    for count, n in counts.items():
        deliveries[bucket(count, DELIVERY_BUCKETS, ">100")] += n
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
        for page in pending_pages(client, stream, group, PAGE, min_idle_ms=params.min_idle_ms):
            ids = [r[ID].decode() for r in page]
            exists = fetch_entries(client, stream, ids)
            rows = [_plan_row(params, stream, group, i, r, exists[i] is not None)
                    for i, r in zip(ids, page, strict=True)]
            yield pa.RecordBatch.from_pylist(rows, schema=REPORT_ARROW)


def _plan_row(params: JobParams, stream: str, group: str, entry_id: str, row: PendingRow,
              exists: bool) -> dict[str, Any]:
    """A real run's claim would add one delivery: route on that count, as the run would."""
    count = row[COUNT] + 1
    if not exists:
        action, reason = ACTION_DELETED, "entry deleted from the stream upstream"
    elif count > params.max_deliveries:
        action, reason = PLAN_DEAD_LETTER, "max-deliveries-exceeded"
    else:
        action, reason = PLAN_REPROCESS, None
    return {"run_id": params.run_id, "stream": stream, "group": group, "id": entry_id,
            "previous_consumer": shown(row[OWNER]), "delivery_count": count,
            "idle_ms": row[IDLE], "action": action, "reason": reason, "error": None,
            "dead_letter_id": None}
