"""What happens to routed entries on an executor: dead-letter moves, then re-processing by
handler calls and acks, by requeue or by reassignment (``reprocess.mode``).

Works on one batch of claimed entries (``recovery.executor.claimed.Claimed``, rows are indices, no
per-row dicts) and returns a ``schemas.REPORT`` batch with one row per input row, in input
order. Round trips are per step, not per entry.

Hand-over, chunk by chunk (``handler.batch_size`` rows): the lease read
(``recovery.executor.handover.lease``), the handler call, then the XACK of the entries it succeeded
on, sent with the next lease read. Failures at the delivery limit are dead-lettered; the
others stay pending. Requeue and reassign move each unit's rows in batched atomic script
calls, one pipeline per batch.

A stream or group that vanishes during the run (NOGROUP, WRONGTYPE) costs only its own rows:
they are reported skipped and the other units go on.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import partial
from typing import Any, TypeVar

import pyarrow as pa
import redis
from redis.cluster import RedisCluster

from recovery.executor.claimed import Claimed, carried_deliveries, copy_fields
from recovery.executor.handover.lease import (
    LEASE_ROWS,
    REASON_DELETED,
    REASON_GONE,
    REASON_VANISHED,
    HandOver,
    xack_commands,
)
from recovery.executor.handover.routed import RoutedBatch, group_rows, route
from recovery.handlers import (
    Handler,
    HandlerTimedOut,
    Result,
    load_handler,
    run_handler,
)
from recovery.params import JobParams, Unit
from recovery.redis_io.dlq_names import dead_letter_key, requeue_key
from recovery.redis_io.error_codes import VANISHED, unit_vanished
from recovery.redis_io.round_trips import (
    ScriptCall,
    UnitScriptCall,
    calls_of,
    each,
    run_script_calls,
    run_unit_script_calls,
)
from recovery.redis_io.scripts import (
    MOVED_DELETED,
    MOVED_NOT_OURS,
    MOVED_TOO_BIG,
    REASSIGNED,
    DeadLetter,
    DeadLetterContext,
    dead_letter_units,
    fresh_lease_ms,
    reassign_batch,
    requeue_batch,
)
from recovery.redis_io.streams import fetch_entries, live_consumers
from recovery.schemas import (
    Action,
    DeathReason,
    Mode,
    Route,
)

REASON_TOO_BIG = ("too many fields (~3950 at most) to move to the dead-letter stream from a "
                  "script; stays pending")
REASON_TOO_BIG_TO_REQUEUE = ("too many fields (~3950 at most) to requeue from a script; "
                             "stays pending")
REASON_HANDLER_FAILED = "handler failed; stays pending for the next run"
T = TypeVar("T")
NOT_CALLED = "not handed to the handler: an earlier call for its stream and group timed out"


@dataclass
class HandlerCalls:
    """The handler of one batch of rows, called chunk by chunk with its timeout.

    After a call times out, the later rows of the same units (stream, group) in this batch are
    not handed over: they fail and stay pending. A hung dependency then costs one timeout and
    one abandoned thread per unit and batch, not per chunk; other units go on.
    """

    handler: Handler
    timeout_s: float | None
    blocked: set[Unit] = field(default_factory=set)

    def admit(self, rb: RoutedBatch, rows: list[int]) -> list[int]:
        """The rows that may be handed over; report the others (blocked units) as failed."""
        if not self.blocked:
            return rows
        admitted = []
        for i in rows:
            if rb.unit(i) in self.blocked:
                rb.set(i, Action.FAILED, REASON_HANDLER_FAILED, NOT_CALLED)
            else:
                admitted.append(i)
        return admitted

    def run(self, rb: RoutedBatch, rows: list[int]) -> list[Result]:
        """Call the handler on `rows`: one Result per row, in order."""
        try:
            return run_handler(self.handler, rb.messages(rows), self.timeout_s)
        except HandlerTimedOut as exc:
            self.blocked.update(rb.unit(i) for i in rows)
            return [Result.failure(str(exc))] * len(rows)


@dataclass
class DeadLetterJob:
    """A row waiting to be dead-lettered, with the reason and the handler's error."""

    row: int
    reason: str
    error: str | None = None


def apply_batch(client: redis.Redis, params: JobParams, claimed: Claimed,
                read_at: float | None = None) -> pa.RecordBatch:
    """Route, dead-letter, handle and ack a batch of claimed entries; return its REPORT batch.

    `read_at` (``time.monotonic()`` seconds), when given, is when the job consumer's
    ownership of all the batch's entries was last read (their claim, sent then): the first
    lease read is skipped while that reading is younger than ``LEASE_FRESH_S``.
    """
    rb = RoutedBatch(claimed, params.max_deliveries)
    routes = rb.by_route()
    for i in routes[Route.GONE]:  # a planned entry left alone has its note (plan_claim)
        rb.set(i, Action.SKIPPED, rb.plan_of(i)[1] or REASON_GONE)
    _clear_deleted(client, rb, routes[Route.DELETED])
    over_limit = [DeadLetterJob(i, DeathReason.OVER_LIMIT) for i in routes[Route.DEAD_LETTER]]
    _dead_letter(client, params, rb, over_limit)
    if params.reprocess_mode == Mode.REQUEUE:
        _requeue(client, params, rb, routes[Route.HANDLE])
    elif params.reprocess_mode == Mode.REASSIGN:
        _reassign(client, params, rb, routes[Route.HANDLE])
    else:
        _handle(client, params, rb, routes[Route.HANDLE], read_at)
    return rb.report()


def _clear_deleted(client: redis.Redis, rb: RoutedBatch, rows: list[int]) -> None:
    """Report entries deleted upstream and ack their PEL slots: Redis 6.2 leaves them with the
    job's consumer; 7.0+ dropped them at the claim (XACK then does nothing), and a deleted
    entry can never be delivered to anyone again."""
    if rows:
        each(client, xack_commands(rb, rb.by_unit(rows)))
    for i in rows:
        rb.set(i, Action.DELETED, REASON_DELETED)


def _handle(client: redis.Redis, params: JobParams, rb: RoutedBatch, rows: list[int],
            read_at: float | None) -> None:
    """Hand `rows` over chunk by chunk (lease, call, ack); dead-letter failures at the limit.

    Leases are read for up to ``LEASE_ROWS`` rows at a time and read again before a call
    whenever the last read is older than ``LEASE_FRESH_S``; acks travel with the next lease
    read. A fast handler thus costs one round trip per ``LEASE_ROWS`` rows, a slow one a
    lease read right before each call.
    """
    rows = _ready(client, params, rb, rows)
    calls = HandlerCalls(load_handler(params.handler_path), params.handler_timeout_s)
    hand_over = HandOver(client, rb, fresh_lease_ms(params.min_idle_ms, params.handler_timeout_s),
                         read_at or 0.0)
    size = params.handler_batch_size
    window = max(size, LEASE_ROWS // size * size)
    for start in range(0, len(rows), window):
        window_rows = rows[start : start + window]
        hand_over.lease(window_rows if hand_over.stale() else [])
        for first in range(0, len(window_rows), size):
            chunk = hand_over.leased_now(window_rows[first:], size)
            chunk = calls.admit(rb, chunk)
            if chunk:
                results = calls.run(rb, chunk)
                hand_over.succeeded(chunk, results)
                _dead_letter(client, params, rb, _failed(params, rb, chunk, results))
    hand_over.lease([])


def _failed(params: JobParams, rb: RoutedBatch, rows: list[int], results: list[Result]
            ) -> list[DeadLetterJob]:
    """Report failures below the limit (they stay pending); return those at the limit."""
    at_limit: list[DeadLetterJob] = []
    for i, res in zip(rows, results, strict=True):
        if res.ok:
            continue
        if (rb.delivery_count[i] or 0) >= params.max_deliveries:
            at_limit.append(DeadLetterJob(i, DeathReason.FAILED_AT_LIMIT, res.error))
        else:
            rb.set(i, Action.FAILED, REASON_HANDLER_FAILED, res.error)
    return at_limit


def _with_fields(client: redis.Redis, rb: RoutedBatch, rows: list[int]) -> list[int]:
    """Fetch fields of rows claimed by an earlier task attempt; report those deleted since."""
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
    _clear_deleted(client, rb, gone)
    return [i for i in rows if rb.has_fields(i)]


def _ready(client: redis.Redis, params: JobParams, rb: RoutedBatch, rows: list[int]
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
    jobs = [DeadLetterJob(i, DeathReason.OVER_LIMIT) for i in sorted(over)]
    _dead_letter(client, params, rb, jobs)
    return [i for i in rows if i not in over]


def _requeue(client: redis.Redis, params: JobParams, rb: RoutedBatch, rows: list[int]) -> None:
    """Append `rows` again to their requeue targets with their deliveries so far (the count
    without the job's own claim) and ack the originals: batched atomic script calls, one
    pipeline. The copies hold the fields the job read (an entry deleted upstream since its
    claim is still requeued once, from that content, as the handler would get it)."""
    rows = _ready(client, params, rb, rows)
    calls: list[ScriptCall] = []
    for unit, unit_rows in rb.by_unit(rows, ordered=True).items():
        target = requeue_key(unit.stream, unit.group, params.requeue_stream)
        for chunk in _batches(unit_rows, params.dlq_batch_size):
            entries = [(rb.id[i], copy_fields(rb.fields_of(i), _deliveries_so_far(rb, i)))
                       for i in chunk]
            calls.append((chunk, partial(requeue_batch, client, unit.stream, target,
                                         unit.group, unit.consumer, entries)))
    for i, status in run_script_calls(client, calls):
        if status == MOVED_TOO_BIG:
            rb.set(i, Action.FAILED, REASON_TOO_BIG_TO_REQUEUE)
        elif not _left_alone(rb, i, status):
            copy_id = status.decode() if isinstance(status, bytes) else str(status)
            rb.set(i, Action.REQUEUED, requeued_id=copy_id)


def _reassign(client: redis.Redis, params: JobParams, rb: RoutedBatch, rows: list[int]) -> None:
    """Give `rows` to live consumers of their groups, in turn (fewest pending first), each
    with its delivery count set back to its deliveries to the application so far: batched
    atomic script calls, one pipeline. Rows of a group without a live consumer stay pending
    on the job's consumer (reported failed, with the reason)."""
    rows = _ready(client, params, rb, rows)
    calls: list[ScriptCall] = []
    for unit, unit_rows in rb.by_unit(rows).items():
        live = _live(client, params, rb, unit, unit_rows)
        pairs = [(i, live[k % len(live)]) for k, i in enumerate(unit_rows)] if live else []
        for chunk in _batches(pairs, params.dlq_batch_size):
            # The PEL count to set: the deliveries so far, but what a requeued copy carries
            # (it still carries it).
            entries = [(rb.id[i], owner, max(0, _deliveries_so_far(rb, i)
                                             - carried_deliveries(rb.fields_of(i))))
                       for i, owner in chunk]
            calls.append((chunk, partial(reassign_batch, client, unit.stream, unit.group,
                                         unit.consumer, entries)))
    for (i, owner), status in run_script_calls(client, calls):
        if status == REASSIGNED:
            rb.set(i, Action.REASSIGNED, reassigned_to=owner)
        else:
            _left_alone(rb, i, status)


def _live(client: redis.Redis, params: JobParams, rb: RoutedBatch, unit: Unit,
          rows: list[int]) -> list[str]:
    """The unit's live consumers; none (its `rows` reported) when it has none or vanished."""
    try:
        live = live_consumers(client, unit.stream, unit.group, params.live_within_ms,
                              params.consumer_prefix + "-")
    except redis.ResponseError as exc:
        if not unit_vanished(exc):
            raise
        for i in rows:
            rb.set(i, Action.SKIPPED, REASON_VANISHED)
        return []
    if not live:
        reason = (f"no live consumer in the group (none seen within reprocess.live_within_ms "
                  f"= {params.live_within_ms} ms); stays pending for the next run")
        for i in rows:
            rb.set(i, Action.FAILED, reason)
    return live


def _deliveries_so_far(rb: RoutedBatch, i: int) -> int:
    """Row `i`'s deliveries to the application so far: its delivery count (carried ones
    included) without the job's own claim, which delivered it to no application."""
    return max(0, (rb.delivery_count[i] or 1) - 1)


def _batches(items: list[T], size: int) -> Iterator[list[T]]:
    """`items` in consecutive lists of at most `size` (one script call each)."""
    for start in range(0, len(items), size):
        yield items[start : start + size]


def _left_alone(rb: RoutedBatch, i: int, status: Any, error: str | None = None) -> bool:
    """Report a script reply that moved nothing (vanished, no longer ours, deleted); False
    when the entry moved."""
    if status == VANISHED:
        rb.set(i, Action.SKIPPED, REASON_VANISHED, error)
    elif status == MOVED_NOT_OURS:
        rb.set(i, Action.SKIPPED, REASON_GONE, error)
    elif status == MOVED_DELETED:
        rb.set(i, Action.DELETED, REASON_DELETED, error)
    else:
        return False
    return True


def _dead_letter(client: redis.Redis, params: JobParams, rb: RoutedBatch,
                 jobs: list[DeadLetterJob]) -> None:
    """Move `jobs` to their dead-letter streams, one pipeline of batched script calls: each
    unit's jobs in chunks of ``dlq_batch_size``; on a standalone server one call carries the
    chunks of several units (up to ``dlq_batch_size`` jobs in all), on a Redis Cluster one
    (the keys of a call must share a slot)."""
    if not jobs:
        return
    now_ms = int(time.time() * 1000)
    job_of = {job.row: job for job in jobs}
    chunks: list[tuple[DeadLetterContext, list[DeadLetterJob]]] = []
    for unit, rows in rb.by_unit(job_of).items():
        ctx = DeadLetterContext(unit.stream, unit.group, unit.consumer,
                                dead_letter_key(unit.stream, params.dlq_suffix),
                                params.run_id, params.max_deliveries, now_ms)
        chunks += [(ctx, chunk) for chunk in _batches([job_of[i] for i in rows],
                                                      params.dlq_batch_size)]
    per_call = 1 if isinstance(client, RedisCluster) else params.dlq_batch_size
    calls: list[UnitScriptCall] = []
    for call in calls_of(chunks, per_call, lambda chunk: len(chunk[1])):
        units = [(ctx, [_dead_letter_entry(rb, j) for j in chunk]) for ctx, chunk in call]
        calls.append(([chunk for _, chunk in call], partial(dead_letter_units, client, units)))
    for job, status in run_unit_script_calls(client, calls):
        _report_dead_letter(rb, job, status)


def _dead_letter_entry(rb: RoutedBatch, job: DeadLetterJob) -> DeadLetter:
    i = job.row
    return DeadLetter(rb.id[i], int(rb.delivery_count[i] or 0), int(rb.idle_ms[i] or 0),
                      rb.previous_consumer[i], job.reason, job.error)


def _report_dead_letter(rb: RoutedBatch, job: DeadLetterJob, status: Any) -> None:
    i = job.row
    if status == MOVED_TOO_BIG:
        rb.set(i, Action.FAILED, REASON_TOO_BIG, job.error)
    elif not _left_alone(rb, i, status, job.error):
        dlq_id = status.decode() if isinstance(status, bytes) else str(status)
        rb.set(i, Action.DEAD_LETTERED, job.reason, job.error, dlq_id)

