"""What happens to routed entries on an executor: dead-letter moves, handler calls, acks.

Works on one batch of claimed entries (``recovery.claimed.Claimed``, rows are indices, no
per-row dicts) and returns a ``schemas.REPORT`` batch with one row per input row, in input
order. Round trips are per step, not per entry.

Hand-over, chunk by chunk (``handler.batch_size`` rows):

1. the lease: one pipelined ``XPENDING <first> <last> <n> <job consumer>`` read per unit,
   for up to ``LEASE_ROWS`` rows at a time and again before a call whenever the last read
   is older than ``LEASE_FRESH_S`` (sent together with the XACKs so far: a fast handler
   costs one round trip per ``LEASE_ROWS`` rows). Only entries still pending and owned by
   the job's consumer are handed over. Entries claimed or renewed less than
   ``fresh_lease_ms`` ago already hold a fresh lease; older ones are renewed atomically by
   ``lease_owned.lua`` (ownership checked again, idle time reset). So an entry a live
   consumer acked, or another run claimed, since the claim is not handed over unless that
   happened in the last ``LEASE_FRESH_S``, and no other run claims a chunk while the handler
   works on it (``handler.timeout_s``). A batch handed over straight after its claim (one
   pass) skips the first read: the claim itself read the lease, as long as it is younger
   than ``LEASE_FRESH_S``.
2. the handler call;
3. XACK of the entries it succeeded on. The ack is unconditional on purpose: the entry has
   been processed, and only a claim with a shorter ``min_idle_ms`` than the call could have
   moved it meanwhile. XACK's reply (a count) tells whether someone else acked some of them
   since their lease; those rows say so in their reason.

A stream or group that vanishes during the run (NOGROUP, WRONGTYPE) costs only its own rows:
they are reported skipped and the other units go on.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import pyarrow as pa
import redis

from recovery.claimed import Claimed
from recovery.config import JobParams
from recovery.dlq_names import dead_letter_key
from recovery.handlers import (
    Handler,
    HandlerTimedOut,
    Result,
    load_handler,
    run_handler,
)
from recovery.redis_conn import VANISHED, ScriptCall, run_script_calls, unit_vanished
from recovery.routed import RoutedBatch, Unit, group_rows
from recovery.schemas import (
    ACTION_DEAD_LETTERED,
    ACTION_DELETED,
    ACTION_FAILED,
    ACTION_REPROCESSED,
    ACTION_SKIPPED,
    ROUTE_DEAD_LETTER,
    ROUTE_DELETED,
    ROUTE_GONE,
    ROUTE_HANDLE,
)
from recovery.scripts import (
    LEASE_DELETED,
    LEASE_RENEWED,
    MOVED_DELETED,
    MOVED_NOT_OURS,
    MOVED_TOO_BIG,
    DeadLetter,
    DeadLetterContext,
    dead_letter_batch,
    fresh_lease_ms,
    renew_lease,
)
from recovery.streams import ID, IDLE, each, fetch_entries, pending_command

LEASE_PAGE_SLACK = 64  # extra XPENDING rows per lease read (other entries of ours in range)
LEASE_ROWS = 1000  # rows whose lease is read in one round trip (whole handler batches)
LEASE_FRESH_S = 0.1  # a lease read older than this is read again before the next call

REASON_OVER_LIMIT = "max-deliveries-exceeded"
REASON_FAILED_AT_LIMIT = "handler-failed-at-limit"
REASON_GONE = ("no longer pending for the job's consumer (acked by a consumer or by an earlier "
               "attempt of this task, or claimed by another consumer)")
REASON_DELETED = "entry deleted from the stream upstream; only its PEL slot was left"
REASON_VANISHED = "the stream or its consumer group vanished during the run (deleted or replaced)"
REASON_TOO_BIG = ("too many fields (~3950 at most) to move to the dead-letter stream from a "
                  "script; stays pending")
REASON_HANDLER_FAILED = "handler failed; stays pending for the next run"
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
                rb.set(i, ACTION_FAILED, REASON_HANDLER_FAILED, NOT_CALLED)
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
    rb = RoutedBatch(claimed, params.run_id, params.max_deliveries)
    routes = rb.by_route()
    for i in routes[ROUTE_GONE]:
        rb.set(i, ACTION_SKIPPED, REASON_GONE)
    _clear_deleted(client, rb, routes[ROUTE_DELETED])
    over_limit = [DeadLetterJob(i, REASON_OVER_LIMIT) for i in routes[ROUTE_DEAD_LETTER]]
    _dead_letter(client, params, rb, over_limit)
    _handle(client, params, rb, routes[ROUTE_HANDLE], read_at)
    return rb.report()


def _clear_deleted(client: redis.Redis, rb: RoutedBatch, rows: list[int]) -> None:
    """Report entries deleted upstream and ack their PEL slots: Redis 6.2 leaves them with the
    job's consumer; 7.0+ dropped them at the claim (XACK then does nothing), and a deleted
    entry can never be delivered to anyone again."""
    if rows:
        each(client, _xacks(rb, rb.by_unit(rows)))
    for i in rows:
        rb.set(i, ACTION_DELETED, REASON_DELETED)


def _handle(client: redis.Redis, params: JobParams, rb: RoutedBatch, rows: list[int],
            read_at: float | None) -> None:
    """Hand `rows` over chunk by chunk (lease, call, ack); dead-letter failures at the limit.

    Leases are read for up to ``LEASE_ROWS`` rows at a time and read again before a call
    whenever the last read is older than ``LEASE_FRESH_S``; acks travel with the next lease
    read. A fast handler thus costs one round trip per ``LEASE_ROWS`` rows, a slow one a
    lease read right before each call.
    """
    rows = _with_fields(client, rb, rows)
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


@dataclass
class HandOver:
    """Lease reads and acks of one batch's hand-over, batched into few round trips."""

    client: redis.Redis
    rb: RoutedBatch
    fresh_ms: int
    read_at: float = 0.0
    to_ack: list[int] = field(default_factory=list)

    def stale(self) -> bool:
        """Whether the last reading of the lease is older than LEASE_FRESH_S."""
        return time.monotonic() - self.read_at > LEASE_FRESH_S

    def lease(self, rows: list[int]) -> None:
        """Send the acks so far and read the lease of `rows`, in one round trip. The rows
        not leased get their outcome; the leased ones are those still without one. The
        reading counts from when it was sent."""
        sent_at = time.monotonic()
        _ack_and_lease(self.client, self.rb, self.to_ack, rows, self.fresh_ms)
        self.to_ack = []
        if rows:
            self.read_at = sent_at

    def leased_now(self, rest: list[int], size: int) -> list[int]:
        """The leased rows among the next `size` of `rest` (rows not handed over yet),
        reading their lease again first when the last read is older than LEASE_FRESH_S."""
        if self.stale():
            self.lease(self._open(rest))
        return self._open(rest[:size])

    def _open(self, rows: list[int]) -> list[int]:
        return [i for i in rows if self.rb.action[i] is None]

    def succeeded(self, rows: list[int], results: list[Result]) -> None:
        """Queue the rows the handler succeeded on for the next round trip's XACK."""
        self.to_ack += [i for i, res in zip(rows, results, strict=True) if res.ok]


def _ack_and_lease(client: redis.Redis, rb: RoutedBatch, to_ack: list[int], to_lease: list[int],
                   fresh_ms: int) -> None:
    """XACK `to_ack` (report them) and read the lease of `to_lease`, in one round trip.

    The rows of `to_lease` not to hand over get their outcome (skipped, deleted); the others
    keep none until the handler has had them.
    """
    acks = rb.by_unit(to_ack)
    leases = rb.by_unit(to_lease)
    replies = each(client, _xacks(rb, acks) + [_lease_read(rb, u, r) for u, r in leases.items()])
    _report_acks(client, rb, acks, replies[: len(acks)])
    stale = []
    for (unit, unit_rows), reply in zip(leases.items(), replies[len(acks):], strict=True):
        owned = _owned_idle(client, rb, unit, unit_rows, reply)
        for i in unit_rows:
            idle = owned.get(rb.id[i]) if owned is not None else None
            if owned is None:
                rb.set(i, ACTION_SKIPPED, REASON_VANISHED)
            elif idle is None:
                rb.set(i, ACTION_SKIPPED, REASON_GONE)
            elif idle >= fresh_ms:
                stale.append(i)
    _renew(client, rb, stale, fresh_ms)


def _xacks(rb: RoutedBatch, by_unit: dict[Unit, list[int]]) -> list[tuple[object, ...]]:
    return [("XACK", stream, group, *(rb.id[i] for i in unit_rows))
            for (stream, group, _), unit_rows in by_unit.items()]


def _lease_read(rb: RoutedBatch, unit: Unit, rows: list[int], start: str | None = None
                ) -> tuple[object, ...]:
    """XPENDING of the job consumer's entries in the rows' ID range (from `start`, if given)."""
    stream, group, consumer = unit
    first, last = rb.id_range(rows)
    return pending_command(stream, group, start or first, last, len(rows) + LEASE_PAGE_SLACK,
                           consumer)


def _owned_idle(client: redis.Redis, rb: RoutedBatch, unit: Unit, rows: list[int],
                reply: Any) -> dict[str, int] | None:
    """Entry ID -> idle ms of the job consumer's entries in the rows' ID range, reading more
    pages while a page comes back full; None when the stream or group vanished.

    `reply` is the first page (XPENDING extended form: [id, consumer, idle ms, count] rows).
    """
    owned: dict[str, int] = {}
    while True:
        if isinstance(reply, Exception):
            if unit_vanished(reply):
                return None
            raise reply
        for row in reply:
            owned[row[ID].decode()] = int(row[IDLE])
        if len(reply) < len(rows) + LEASE_PAGE_SLACK:
            return owned
        after = "(" + reply[-1][ID].decode()
        reply = each(client, [_lease_read(rb, unit, rows, start=after)])[0]


def _renew(client: redis.Redis, rb: RoutedBatch, rows: list[int], fresh_ms: int) -> None:
    """Renew the lease of `rows` (owned, not fresh) atomically; report those not renewed."""
    if not rows:
        return
    calls: list[ScriptCall] = [
        (unit_rows, partial(renew_lease, client, stream, group, consumer,
                            [rb.id[i] for i in unit_rows], fresh_ms=fresh_ms))
        for (stream, group, consumer), unit_rows in rb.by_unit(rows, ordered=True).items()]
    for i, reply in run_script_calls(client, calls):
        if reply == LEASE_DELETED:
            rb.set(i, ACTION_DELETED, REASON_DELETED)
        elif reply == VANISHED:
            rb.set(i, ACTION_SKIPPED, REASON_VANISHED)
        elif reply != LEASE_RENEWED:
            rb.set(i, ACTION_SKIPPED, REASON_GONE)


def _report_acks(client: redis.Redis, rb: RoutedBatch, acks: dict[Unit, list[int]],
                 replies: list[Any]) -> None:
    """Report rows handled and acked, per unit, from XACK's replies (a count per unit).

    XACK counts 0 for an entry someone else acked first, and also for a stream or group that
    no longer exists. A short count is therefore told apart with one XPENDING summary per
    such unit (NOGROUP: vanished), sent only then.
    """
    short = [unit for (unit, rows), reply in zip(acks.items(), replies, strict=True)
             if not isinstance(reply, Exception) and int(reply) < len(rows)]
    probes = each(client, [("XPENDING", stream, group) for stream, group, _ in short])
    vanished = {unit for unit, probe in zip(short, probes, strict=True)
                if isinstance(probe, Exception) and unit_vanished(probe)}
    for (unit, rows), reply in zip(acks.items(), replies, strict=True):
        if isinstance(reply, Exception) and not unit_vanished(reply):
            raise reply
        if isinstance(reply, Exception) or unit in vanished:
            for i in rows:
                rb.set(i, ACTION_SKIPPED, "handled, but " + REASON_VANISHED + " before the ack")
            continue
        reason = None
        if int(reply) < len(rows):
            reason = (f"handled; {len(rows) - int(reply)} of the {len(rows)} entries acked "
                      "with it had been acked by another consumer since their lease")
        for i in rows:
            rb.set(i, ACTION_REPROCESSED, reason)


def _failed(params: JobParams, rb: RoutedBatch, rows: list[int], results: list[Result]
            ) -> list[DeadLetterJob]:
    """Report failures below the limit (they stay pending); return those at the limit."""
    at_limit: list[DeadLetterJob] = []
    for i, res in zip(rows, results, strict=True):
        if res.ok:
            continue
        if (rb.delivery_count[i] or 0) >= params.max_deliveries:
            at_limit.append(DeadLetterJob(i, REASON_FAILED_AT_LIMIT, res.error))
        else:
            rb.set(i, ACTION_FAILED, REASON_HANDLER_FAILED, res.error)
    return at_limit


def _with_fields(client: redis.Redis, rb: RoutedBatch, rows: list[int]) -> list[int]:
    """Fetch fields of rows claimed by an earlier task attempt; report those deleted since."""
    missing = [i for i in rows if not rb.has_fields(i)]
    if not missing:
        return rows
    gone = []
    for stream, stream_rows in group_rows(missing, rb.stream.__getitem__).items():
        try:
            found = fetch_entries(client, stream, [rb.id[i] for i in stream_rows])
        except redis.ResponseError as exc:
            if not unit_vanished(exc):
                raise
            for i in stream_rows:
                rb.set(i, ACTION_SKIPPED, REASON_VANISHED)
            continue
        for i in stream_rows:
            fields = found[rb.id[i]]
            if fields is None:
                gone.append(i)
            else:
                rb.fetched[i] = fields
    _clear_deleted(client, rb, gone)
    return [i for i in rows if rb.has_fields(i)]


def _dead_letter(client: redis.Redis, params: JobParams, rb: RoutedBatch,
                 jobs: list[DeadLetterJob]) -> None:
    """Move `jobs` to their dead-letter streams, one pipeline of batched script calls."""
    if not jobs:
        return
    now_ms = int(time.time() * 1000)
    calls: list[ScriptCall] = []
    job_of = {job.row: job for job in jobs}
    for (stream, group, consumer), rows in rb.by_unit(job_of).items():
        unit_jobs = [job_of[i] for i in rows]
        ctx = DeadLetterContext(stream, group, consumer, dead_letter_key(stream, params.dlq_suffix),
                                params.run_id, params.max_deliveries, now_ms)
        for start in range(0, len(unit_jobs), params.dlq_batch_size):
            chunk = unit_jobs[start : start + params.dlq_batch_size]
            entries = [_dead_letter_entry(rb, j) for j in chunk]
            calls.append((chunk, partial(dead_letter_batch, client, ctx, entries)))
    for job, status in run_script_calls(client, calls):
        _report_dead_letter(rb, job, status)


def _dead_letter_entry(rb: RoutedBatch, job: DeadLetterJob) -> DeadLetter:
    i = job.row
    return DeadLetter(rb.id[i], int(rb.delivery_count[i] or 0), int(rb.idle_ms[i] or 0),
                      rb.previous_consumer[i], job.reason, job.error)


def _report_dead_letter(rb: RoutedBatch, job: DeadLetterJob, status: Any) -> None:
    i = job.row
    if status == VANISHED:
        rb.set(i, ACTION_SKIPPED, REASON_VANISHED, job.error)
    elif status == MOVED_TOO_BIG:
        rb.set(i, ACTION_FAILED, REASON_TOO_BIG, job.error)
    elif status == MOVED_NOT_OURS:
        rb.set(i, ACTION_SKIPPED, REASON_GONE, job.error)
    elif status == MOVED_DELETED:
        rb.set(i, ACTION_DELETED, REASON_DELETED, job.error)
    else:
        dlq_id = status.decode() if isinstance(status, bytes) else str(status)
        rb.set(i, ACTION_DEAD_LETTERED, job.reason, job.error, dlq_id)

