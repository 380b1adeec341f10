"""Routed entries made ready for re-processing, whatever the mode: entries deleted upstream
reported and their PEL slots acked; entries taken back from an earlier task attempt (their
claim did not read their fields) given their fields and the deliveries a requeued copy
carries; those then over the delivery limit dead-lettered."""

from __future__ import annotations

import redis

from recovery.executor.handover.dead_letter import dead_letter, over_limit
from recovery.executor.handover.lease import REASON_DELETED, REASON_VANISHED, xack_commands
from recovery.executor.handover.routed import RoutedBatch, group_rows, route
from recovery.params import JobParams
from recovery.redis_io.commands import pending_summaries
from recovery.redis_io.error_codes import unit_vanished
from recovery.redis_io.round_trips import each
from recovery.redis_io.streams import fetch_entries
from recovery.schemas import Action, Route


def clear_deleted(client: redis.Redis, rb: RoutedBatch, rows: list[int]) -> None:
    """Report entries deleted upstream and ack their PEL slots: Redis 6.2 leaves them with the
    job's consumer; 7.0+ dropped them at the claim (XACK then does nothing), and a deleted
    entry can never be delivered to anyone again.

    An entry reads back as gone (XRANGE answers nothing, a claim lists it deleted) also when
    its whole stream was deleted between its claim and that read, e.g. a split part's claim
    by ID and the hand-over's fetch of its fields. So the rows' units are asked first
    (:func:`_vanished`): the rows of a unit whose stream or group no longer exists are
    `skipped` as vanished, as the rest of that unit; only the others are `deleted`."""
    vanished = _vanished(client, rb, rows)
    for i in vanished:
        rb.set(i, Action.SKIPPED, REASON_VANISHED)
    rows = [i for i in rows if i not in vanished]
    if rows:
        each(client, xack_commands(rb, rb.by_unit(rows)))
    for i in rows:
        rb.set(i, Action.DELETED, REASON_DELETED)


def _vanished(client: redis.Redis, rb: RoutedBatch, rows: list[int]) -> set[int]:
    """Those of `rows` whose unit's stream or group no longer exists: one ``XPENDING stream
    group`` summary per unit, in one round trip, sent only when there are rows (NOGROUP /
    WRONGTYPE: vanished)."""
    units = rb.by_unit(rows)
    probes = pending_summaries(client, [(unit.stream, unit.group) for unit in units])
    vanished: set[int] = set()
    for unit_rows, probe in zip(units.values(), probes, strict=True):
        if isinstance(probe, Exception):
            if not unit_vanished(probe):
                raise probe
            vanished.update(unit_rows)
    return vanished


def ready(client: redis.Redis, params: JobParams, rb: RoutedBatch, rows: list[int]
          ) -> list[int]:
    """The rows to re-process, with their fields: entries taken back from an earlier attempt
    get theirs fetched (those gone are reported deleted) and, where they are requeued copies,
    the deliveries they carry added to their counts; those now over the limit are
    dead-lettered."""
    rows = _with_fields(client, rb, rows)
    over = set()
    for i in rows if rb.fetched else ():
        if i in rb.fetched:
            rb.add_carried(i)
            if route(False, rb.delivery_count[i], params.max_deliveries) == Route.DEAD_LETTER:
                over.add(i)
    dead_letter(client, params, rb, over_limit(rb, sorted(over)))
    return [i for i in rows if i not in over]


def _with_fields(client: redis.Redis, rb: RoutedBatch, rows: list[int]) -> list[int]:
    """Fetch fields of rows claimed without them (IDs only, or by an earlier task attempt);
    report those found gone (:func:`clear_deleted`: deleted, or skipped when their stream or
    group vanished)."""
    claimed, fetched = rb.fields, rb.fetched
    missing = [i for i in rows if claimed[i] is None and i not in fetched]
    if not missing:
        return rows
    gone = []
    for stream, stream_rows in group_rows(missing, rb.stream).items():
        try:
            found = fetch_entries(client, stream, [rb.id[i] for i in stream_rows])
        except redis.ResponseError as exc:
            if not unit_vanished(exc):
                raise
            for i in stream_rows:
                rb.set(i, Action.SKIPPED, REASON_VANISHED)
            continue
        for i in stream_rows:
            fields = found[rb.id[i]]
            if fields is None:
                gone.append(i)
            else:
                rb.fetched[i] = fields
    clear_deleted(client, rb, gone)
    return [i for i in rows if rb.has_fields(i)]
