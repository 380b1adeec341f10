"""Dead-letter moves of routed entries on an executor, and the replies of the move scripts
every hand-over shares (moved, or left alone: vanished, no longer the job's, deleted).

One pipeline of batched script calls per hand-over step; on a standalone server one call
carries the chunks of several units, on a Redis Cluster one unit (a call's keys share a
slot). Reply shapes: ``recovery.redis_io.scripts.dead_letter_units``.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import partial
from typing import Any, TypeVar

import redis
from redis.cluster import RedisCluster

from recovery.counts import INT64_MAX
from recovery.executor.handover.lease import REASON_DELETED, REASON_GONE, REASON_VANISHED
from recovery.executor.handover.resent import REASON_UNCERTAIN, UNCERTAIN, recheck_resent
from recovery.executor.handover.routed import RoutedBatch
from recovery.params import JobParams
from recovery.redis_io.dlq_names import DeadLetterNames, refused_reason
from recovery.redis_io.error_codes import VANISHED, TargetRefused
from recovery.redis_io.key_holds import HOLD_REFUSED, hold_key, hold_refused
from recovery.redis_io.retries import failed_attempts
from recovery.redis_io.round_trips import UnitScriptCall, calls_of, run_unit_script_calls
from recovery.redis_io.scripts import (
    ACKDEL_DELETED,
    MOVED_DELETED,
    MOVED_NOT_OURS,
    MOVED_TOO_BIG,
    DeadLetter,
    DeadLetterContext,
    dead_letter_units,
)
from recovery.schemas import Action, DeathReason

REASON_TOO_BIG = ("too many fields (~3950 at most) to move to the dead-letter stream from a "
                  "script; stays pending")
T = TypeVar("T")


@dataclass
class DeadLetterJob:
    """A row waiting to be dead-lettered, with the reason and the handler's error."""

    row: int
    reason: str
    error: str | None = None


def over_limit(rb: RoutedBatch, rows: Iterable[int]) -> list[DeadLetterJob]:
    """The jobs of `rows`, routed to the dead-letter stream by their delivery count: over the
    limit, or at the largest count (:func:`over_limit_reason`)."""
    return [DeadLetterJob(i, over_limit_reason(rb.delivery_count[i])) for i in rows]


def over_limit_reason(count: int | None) -> DeathReason:
    """``delivery-count-at-maximum`` for a count at INT64_MAX (Redis 8.8's XNACK ... FATAL
    sets it, and the job reads a wrapped count so), else ``max-deliveries-exceeded``."""
    return DeathReason.MAX_COUNT if count == INT64_MAX else DeathReason.OVER_LIMIT


def batches(items: list[T], size: int) -> Iterator[list[T]]:
    """`items` in consecutive lists of at most `size` (one script call each)."""
    for start in range(0, len(items), size):
        yield items[start : start + size]


def left_alone(rb: RoutedBatch, i: int, status: Any, error: str | None = None) -> bool:
    """Report a move script's reply that moved nothing (vanished, no longer ours, deleted);
    False when the entry moved."""
    if status == VANISHED:
        rb.set(i, Action.SKIPPED, REASON_VANISHED, error)
    elif status == MOVED_NOT_OURS:
        rb.set(i, Action.SKIPPED, REASON_GONE, error)
    elif status == MOVED_DELETED:
        rb.set(i, Action.DELETED, REASON_DELETED, error)
    else:
        return False
    return True


def dead_letter(client: redis.Redis, params: JobParams, rb: RoutedBatch,
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
    names = DeadLetterNames(params.dlq_suffix, params.dlq_stream)
    for unit, rows in rb.by_unit(job_of).items():
        ctx = DeadLetterContext(unit.stream, unit.group, unit.consumer,
                                names.key(unit.stream, unit.group),
                                params.run_id, params.max_deliveries, now_ms,
                                params.dlq_check_newest, params.delete_acked,
                                _holds_of(params, rb, unit.stream, unit.group))
        chunks += [(ctx, chunk) for chunk in batches([job_of[i] for i in rows],
                                                     params.dlq_batch_size)]
    per_call = 1 if isinstance(client, RedisCluster) else params.dlq_batch_size
    calls: list[UnitScriptCall] = []
    for call in calls_of(chunks, per_call, lambda chunk: len(chunk[1])):
        units = [(ctx, [_dead_letter_entry(rb, j) for j in chunk]) for ctx, chunk in call]
        calls.append(([chunk for _, chunk in call], partial(dead_letter_units, client, units)))
    for job, status in _sent(client, params, rb, names, calls):
        if isinstance(status, TargetRefused):
            i = job.row
            held = _holds_of(params, rb, rb.stream[i], rb.group[i])
            reason = hold_refused(held, status) \
                if held is not None and status.kind.startswith(HOLD_REFUSED) else \
                refused_reason(names.key(rb.stream[i], rb.group[i]), status)
            rb.set(i, Action.SKIPPED, reason, job.error)
        else:
            _report_dead_letter(rb, job, status)


def _sent(client: redis.Redis, params: JobParams, rb: RoutedBatch, names: DeadLetterNames,
          calls: list[UnitScriptCall]) -> list[tuple[Any, Any]]:
    """(job, reply element) of `calls`; after a call sent again (a lost reply: the client's
    retry count grew), each 0 read again (``recovery.executor.handover.resent``)."""
    sent_at, failures = time.monotonic(), failed_attempts(client)
    pairs = run_unit_script_calls(client, calls)
    if failed_attempts(client) == failures:
        return pairs

    def where(job: DeadLetterJob) -> tuple[str, str, str, str]:
        stream, group = rb.stream[job.row], rb.group[job.row]
        return stream, group, names.key(stream, group), rb.id[job.row]
    return recheck_resent(client, pairs, sent_at, where, params.run_id, params.delete_acked)


def _holds_of(params: JobParams, rb: RoutedBatch, stream: str, group: str) -> str | None:
    """The hash of held keys that a dead-letter move of `stream` / `group` records its key
    in (``recovery.redis_io.key_holds``): where `rb` carries ordering keys (its heads hold
    them: ``order.dead_letter_releases = false``) and `stream` is ordered; else None."""
    order = params.order
    if order is None or rb.order_keys is None or order.field_of(stream) is None:
        return None
    return hold_key(order.hold_prefix, stream, group)


def _dead_letter_entry(rb: RoutedBatch, job: DeadLetterJob) -> DeadLetter:
    i = job.row
    return DeadLetter(rb.id[i], int(rb.delivery_count[i] or 0), int(rb.idle_ms[i] or 0),
                      rb.previous_consumer[i], job.reason, job.error,
                      None if rb.order_keys is None else rb.order_keys[i])


def _report_dead_letter(rb: RoutedBatch, job: DeadLetterJob, status: Any) -> None:
    i = job.row
    if status == MOVED_TOO_BIG:
        rb.set(i, Action.FAILED, REASON_TOO_BIG, job.error)
    elif status == UNCERTAIN:
        rb.set(i, Action.SKIPPED, REASON_UNCERTAIN, job.error)
    elif not left_alone(rb, i, status, job.error):
        new_id, deleted = moved_and_deleted(status)
        rb.set(i, Action.DEAD_LETTERED, job.reason, job.error, new_id, entry_deleted=deleted)


def moved_and_deleted(status: Any) -> tuple[str, bool | None]:
    """A move script's reply for a moved entry: its new ID (the dead letter's, the copy's),
    and, where the original was acked with XACKDEL ... ACKED (``[ID, code]``), whether it
    was deleted (False: kept, another group still references it); None without it."""
    deleted = None
    if isinstance(status, list):
        status, deleted = status[0], int(status[1]) == ACKDEL_DELETED
    return (status.decode() if isinstance(status, bytes) else str(status)), deleted
