"""Read-only passes over the PEL on executors: group health histograms and the dry-run plan.

Nothing here writes to Redis: only XPENDING (extended form), XRANGE and, where dead-lettered
heads hold their keys, HMGET of the keys a page names in the unit's hash of held keys. The
histograms' buckets: ``recovery.executor.histogram``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import pyarrow as pa
import redis

from recovery.executor.claim.backoff import NotDue, due_in_ms
from recovery.executor.claimed import odd_carried, with_carried
from recovery.executor.handover.dead_letter import over_limit_reason
from recovery.executor.handover.modes import mode_of
from recovery.executor.handover.routed import ODD_CARRIED, route
from recovery.executor.histogram import PelHistogram
from recovery.executor.ordered import key_of
from recovery.executor.partitions import ArrowFn, coalesced, per_unit
from recovery.executor.tally import PassMaker
from recovery.params import JobParams, Unit
from recovery.redis_io.key_holds import hold_key, read_heads
from recovery.redis_io.redis_conn import RedisConn
from recovery.redis_io.streams import (
    COUNT,
    ID,
    IDLE,
    OWNER,
    Fields,
    PendingRow,
    fetch_entries,
    pending_pages,
    shown,
    stream_id_key,
)
from recovery.schemas import (
    PEL_HISTOGRAM,
    Action,
    ReportRow,
    Route,
    arrow,
    report_rows,
)

PAGE = 10_000
HISTOGRAM_ROWS = 1000  # units per output batch of the histogram pass (one row each)
HISTOGRAM_ARROW = arrow(PEL_HISTOGRAM)


def histogram_partition(params: JobParams) -> ArrowFn:
    """UNIT batches -> PEL_HISTOGRAM batches: one row of counts per unit, up to
    ``HISTOGRAM_ROWS`` rows per batch."""
    return coalesced(
        per_unit(params, lambda: lambda conn, unit: _histogram_unit(conn, unit)),
        HISTOGRAM_ROWS)


def _histogram_unit(conn: RedisConn, unit: Unit) -> Iterator[pa.RecordBatch]:
    histogram = PelHistogram()
    with conn.errors(unit.stream, unit.group):
        for page in pending_pages(conn.client, unit.stream, unit.group, PAGE):
            histogram.add(page)
    yield pa.RecordBatch.from_pylist([histogram.row(unit.stream, unit.group).as_dict()],
                                     schema=HISTOGRAM_ARROW)


def plan_partition(params: JobParams) -> PassMaker:
    """UNIT batches -> REPORT batches of what a real run would do (dry run, no claim). Under
    a backoff schedule the entries not due are left out of the plan and counted in the
    task's tally, as a run's claim counts them."""
    return lambda tally: per_unit(
        params, lambda: lambda conn, unit: _plan_unit(
            conn, params, unit, tally.waiting(unit.stream, unit.group) if params.backoff
            else None))


def _plan_unit(conn: RedisConn, params: JobParams, unit: Unit, waiting: NotDue | None
               ) -> Iterator[pa.RecordBatch]:
    stream, group, client = unit.stream, unit.group, conn.client
    with conn.errors(stream, group):
        holds = _held_heads(params, stream, group)
        for page in pending_pages(client, stream, group, PAGE, min_idle_ms=params.min_idle_ms):
            if waiting is not None:
                page = _due_rows(params, unit, page, waiting)
                if not page:
                    continue
            ids = [r[ID].decode() for r in page]
            found = fetch_entries(client, stream, ids)
            rows = [_plan_row(params, stream, group, i, r, found[i])
                    for i, r in zip(ids, page, strict=True)]
            if holds is not None:
                _predict_holds(client, params, holds, rows, [found[i] for i in ids])
            yield report_rows(rows)


@dataclass
class _Holds:
    """A unit's hash of held keys (`name`) and what a dry run knows of it so far: key ->
    head ID (`heads`: read from the hash the first time the key is seen, or the entry the
    run would dead-letter at the limit), and the keys read already (`read`)."""

    name: str
    heads: dict[bytes, str] = field(default_factory=dict)
    read: set[bytes] = field(default_factory=set)

    def read_keys(self, client: redis.Redis, keys: list[bytes]) -> None:
        """Read the holds of the `keys` not read before (HMGET, chunked:
        ``recovery.redis_io.key_holds.read_heads``)."""
        new = [k for k in dict.fromkeys(keys) if k not in self.read]
        if not new:
            return
        [found] = read_heads(client, [(self.name, new)])
        self.read.update(new)
        self.heads.update((k, h[0]) for k, h in zip(new, found, strict=True) if h is not None)


def _held_heads(params: JobParams, stream: str, group: str) -> _Holds | None:
    """Where dead-lettered heads hold their keys (``order.dead_letter_releases = false``) and
    `stream` is ordered: its hash of held keys (``recovery.redis_io.key_holds``), read key
    by key as pages name them; else None (nothing to predict)."""
    order = params.order
    if order is None or order.dead_letter_releases or order.field_of(stream) is None:
        return None
    return _Holds(hold_key(order.hold_prefix, stream, group))


def _predict_holds(client: redis.Redis, params: JobParams, holds: _Holds,
                   rows: list[ReportRow], fields: list[Fields | None]) -> None:
    """A page of plan `rows` (in ID order, pages in order) as a real run would hold them:
    an entry after its key's held head (in `holds`, whose hash is read for the page's keys
    not read before) would be held (``would_hold``); an entry the run would dead-letter at
    the delivery limit becomes its key's head in `holds` (its reason says it would hold the
    key). Entries without the key are never held so."""
    name = params.order.field_of(rows[0].stream) if params.order and rows else None
    keys = [key_of(entry_fields, name) for entry_fields in fields]
    holds.read_keys(client, [k for k in keys if k is not None])
    for j, (row, key) in enumerate(zip(rows, keys, strict=True)):
        if key is None:
            continue
        head = holds.heads.get(key)
        if head is not None and stream_id_key(head) < stream_id_key(row.id):
            rows[j] = row._replace(action=Action.WOULD_HOLD, reason=(
                f"held behind {head} of its key, dead-lettered (or to be, before it) with "
                "order.dead_letter_releases = false"))
        elif head is None and row.action == Action.WOULD_DEAD_LETTER:
            holds.heads[key] = row.id
            rows[j] = row._replace(reason=f"{row.reason}; would hold its key's later entries")


def _due_rows(params: JobParams, unit: Unit, page: list[PendingRow], waiting: NotDue
              ) -> list[PendingRow]:
    """The rows of `page` due under the schedule; the others are counted in `waiting`."""
    now_ms = int(time.time() * 1000)
    mine = unit.consumer.encode()
    due, waits = [], []
    for row in page:
        left = due_in_ms(params, row[COUNT], row[IDLE], row[OWNER] == mine)
        if left:
            waits.append(left)
        else:
            due.append(row)
    if waits:
        waiting.add(len(waits), min(waits), now_ms)
    return due


def _missing_key(params: JobParams, stream: str, fields: Fields | None) -> str | None:
    """The key field an entry lacks where a real run dead-letters it for that
    (``order.missing_key = dead_letter``), else None."""
    order = params.order
    if order is None or order.missing_key != "dead_letter" or fields is None:
        return None
    name = order.field_of(stream)
    if name is None or any(field == name.encode() for field, _ in fields):
        return None
    return name


def _plan_row(params: JobParams, stream: str, group: str, entry_id: str, row: PendingRow,
              fields: Fields | None) -> ReportRow:
    """A real run's claim would add one delivery (and a requeued copy's carried count):
    route on that count, as the run would. `fields` None: deleted upstream."""
    count = with_carried(row[COUNT] + 1, fields)
    action: str
    reason: str | None
    missing = _missing_key(params, stream, fields)
    if fields is None:
        action, reason = Action.DELETED, "entry deleted from the stream upstream"
    elif missing is not None:
        action, reason = Action.WOULD_DEAD_LETTER, (
            f"no {missing!r} field to order it by (order.missing_key = dead_letter)")
    elif route(False, count, params.max_deliveries) == Route.DEAD_LETTER:
        action, reason = Action.WOULD_DEAD_LETTER, over_limit_reason(count)
    else:
        action = mode_of(params.reprocess_mode).planned
        reason = None
    if fields is not None and odd_carried(fields):
        reason = f"{reason}; {ODD_CARRIED}" if reason else ODD_CARRIED
    return ReportRow(stream=stream, group=group, id=entry_id,
                     previous_consumer=shown(row[OWNER]), delivery_count=count,
                     idle_ms=row[IDLE], action=action, reason=reason)
