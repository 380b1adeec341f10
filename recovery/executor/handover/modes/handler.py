"""``reprocess.mode = handler`` (the default): the Python handler ``handler.path`` names
gets each entry, chunk by chunk (``handler.batch_size`` rows), under a lease
(``recovery.executor.handover.lease``); the entries it succeeded on are acked with the next
lease read. Failures at the delivery limit, and those the handler rejects for good
(``Result.dead_letter``, or an exception of ``handler.dead_letter_exceptions``), are
dead-lettered; the others stay pending.

Such an exception raised for a chunk of several messages does not say which one raised it:
the chunk is then handed over again message by message (each call a batch of one, each with
its lease checked as before any call), so only the messages that raise it are dead-lettered
and the others get their own verdict. Handlers are idempotent (at-least-once): the messages
before the one that raised may be handled twice."""

from __future__ import annotations

from dataclasses import dataclass, field

import redis

from recovery.executor.handover.abandoned import keep_leased
from recovery.executor.handover.dead_letter import DeadLetterJob, dead_letter
from recovery.executor.handover.lease import LEASE_ROWS, HandOver, reading_fresh_ms
from recovery.executor.handover.modes.base import ReprocessMode
from recovery.executor.handover.routed import RoutedBatch
from recovery.handlers import (
    BatchRejected,
    Handler,
    HandlerTimedOut,
    Rejects,
    Result,
    load_exceptions,
    load_handler,
    run_handler,
)
from recovery.params import JobParams, Unit
from recovery.redis_io.scripts import fresh_lease_ms
from recovery.schemas import Action, DeathReason, Mode

REASON_HANDLER_FAILED = "handler failed; stays pending for the next run"
REASON_STILL_RUNNING = ("handler call timed out and may still be running: stays pending, "
                        "leased to the job's consumer while it runs, for the next run")
NOT_CALLED = "not handed to the handler: an earlier call for its stream and group timed out"


@dataclass
class HandlerCalls:
    """The handler of one batch of rows, called chunk by chunk with its timeout.

    After a call times out, the later rows of the same units (stream, group) in this batch are
    not handed over: they fail and stay pending. A hung dependency then costs one timeout and
    one abandoned thread per unit and batch, not per chunk; other units go on. The rows of
    the call that timed out (`running`) stay leased while it runs
    (``recovery.executor.handover.abandoned``) and are never dead-lettered in this run.
    """

    handler: Handler
    timeout_s: float | None
    rejects: Rejects = ()
    blocked: set[Unit] = field(default_factory=set)
    running: set[int] = field(default_factory=set)

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

    def run(self, params: JobParams, rb: RoutedBatch, rows: list[int]) -> list[Result] | None:
        """Call the handler on `rows`: one Result per row, in order; None when it raised one
        of ``rejects`` for several rows (hand them over one by one). A call that timed out
        fails its rows, which stay leased while it runs."""
        try:
            return run_handler(self.handler, rb.messages(rows), self.timeout_s, self.rejects)
        except BatchRejected:
            return None
        except HandlerTimedOut as exc:
            self.blocked.update(rb.unit(i) for i in rows)
            self.running.update(rows)
            keep_leased(params.redis, {
                unit: [rb.id[i] for i in unit_rows]
                for unit, unit_rows in rb.by_unit(rows, ordered=True).items()},
                exc.call, params.min_idle_ms)
            return [Result.failure(str(exc))] * len(rows)


class HandlerMode(ReprocessMode):
    """Re-processed by the handler, acked after its success (``reprocessed``)."""

    name = Mode.HANDLER
    done = Action.REPROCESSED
    planned = Action.WOULD_REPROCESS
    scripts = ("lease_owned",)
    calls_handler = True

    def hand_over(self, client: redis.Redis, params: JobParams, rb: RoutedBatch,
                  rows: list[int], read_at: float | None) -> None:
        """Hand `rows` over chunk by chunk (lease, call, ack); dead-letter failures at the
        limit.

        Leases are read for up to ``LEASE_ROWS`` rows at a time and read again before a call
        whenever the last read is older than ``LEASE_FRESH_S``; acks travel with the next
        lease read. A fast handler thus costs one round trip per ``LEASE_ROWS`` rows, a slow
        one a lease read right before each call.
        """
        calls = HandlerCalls(load_handler(params.handler_path), params.handler_timeout_s,
                             load_exceptions(params.handler_dead_letter_exceptions))
        fresh_ms = fresh_lease_ms(params.min_idle_ms, params.handler_timeout_s)
        hand_over = HandOver(client, rb, reading_fresh_ms(fresh_ms), read_at or 0.0,
                             delete_acked=params.delete_acked)
        if params.handler_timeout_s is not None:
            hand_over.budget_s = fresh_ms / 1000
        if read_at is not None:  # the claim, sent then, left each entry idle 0
            hand_over.leased_at = dict.fromkeys(rows, read_at)
        size = params.handler_batch_size
        window = max(size, LEASE_ROWS // size * size)
        for start in range(0, len(rows), window):
            window_rows = rows[start : start + window]
            hand_over.lease(window_rows if hand_over.stale() else [])
            for first in range(0, len(window_rows), size):
                chunk = calls.admit(rb, hand_over.leased_now(window_rows[first:], size))
                if chunk:
                    _call_chunk(client, params, rb, hand_over, calls, chunk)
        hand_over.lease([])


def _call_chunk(client: redis.Redis, params: JobParams, rb: RoutedBatch, hand_over: HandOver,
                calls: HandlerCalls, chunk: list[int]) -> None:
    """One handler call on the leased `chunk`: queue its successes for the ack and
    dead-letter what must go now. A chunk of several that raised one of
    ``handler.dead_letter_exceptions`` is handed over again row by row (lease checked before
    each call, blocked units skipped)."""
    results = calls.run(params, rb, chunk)
    if results is None:
        for k in range(len(chunk)):
            one = calls.admit(rb, hand_over.leased_now(chunk[k:], 1))
            if one:
                _call_chunk(client, params, rb, hand_over, calls, one)
        return
    hand_over.succeeded(chunk, results)
    dead_letter(client, params, rb, _failed(params, rb, chunk, results, calls.running))


def _failed(params: JobParams, rb: RoutedBatch, rows: list[int], results: list[Result],
            running: set[int]) -> list[DeadLetterJob]:
    """Report failures below the limit (they stay pending); return those to dead-letter now:
    the ones the handler rejected for good (``Result.dead_letter``) and those at the limit,
    but never a row whose call timed out (`running`): it may still succeed, so it stays
    pending (the next run's claim dead-letters it at the limit once its call has ended)."""
    now: list[DeadLetterJob] = []
    for i, res in zip(rows, results, strict=True):
        if res.ok:
            continue
        if i in running:
            rb.set(i, Action.FAILED, REASON_STILL_RUNNING, res.error)
        elif res.final:
            now.append(DeadLetterJob(i, DeathReason.REJECTED, res.error))
        elif (rb.delivery_count[i] or 0) >= params.max_deliveries:
            now.append(DeadLetterJob(i, DeathReason.FAILED_AT_LIMIT, res.error))
        else:
            rb.set(i, Action.FAILED, REASON_HANDLER_FAILED, res.error)
    return now


MODE = HandlerMode()
