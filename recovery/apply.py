"""What happens to routed entries on an executor: dead-letter moves, handler calls, acks.

Works on plain rows (dicts with the columns of ``schemas.ROUTED``) and returns report rows
(dicts with the columns of ``schemas.REPORT``). Round trips are per step, not per entry:
every script call of a step goes into one pipeline.

Hand-over: the handler gets the rows in chunks of ``handler.batch_size``. Just before each
call the job renews its lease on the chunk (``renew_lease``): only entries still pending and
owned by the job's consumer are handed over, with their idle time reset, and they are acked
right after the call. So an entry that a live consumer acked, or another run claimed, since
the claim is never handed over afterwards; and no other run claims a chunk while the handler
works on it, as long as the call ends within ``claim.min_idle_ms`` (``handler.timeout_s``).

A stream or group that vanishes during the run (NOGROUP, WRONGTYPE) costs only its own rows:
they are reported skipped and the other units go on.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import redis

from recovery.config import JobParams
from recovery.dlq_names import dead_letter_key
from recovery.handlers import (
    Handler,
    HandlerTimedOut,
    Message,
    Result,
    load_handler,
    run_handler,
)
from recovery.redis_conn import VANISHED, ScriptCall, run_script_calls, unit_vanished
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
    ack_owned,
    dead_letter_batch,
    fresh_lease_ms,
    renew_lease,
    stream_id_key,
)
from recovery.streams import fetch_entries

Row = dict[str, Any]
Unit = tuple[str, str, str]  # stream, group, job consumer
# ack_owned or renew_lease: (client, stream, group, consumer, ids, pipe) -> reply per ID
UnitScript = Callable[..., Any]

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
class DeadLetterJob:
    """A row waiting to be dead-lettered, with the reason and the handler's error."""

    row: Row
    reason: str
    error: str | None = None


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

    def admit(self, rows: list[Row], out: Outcomes) -> list[Row]:
        """The rows that may be handed over; report the others (blocked units) as failed."""
        admitted = []
        for row in rows:
            if _unit(row) in self.blocked:
                out.add(row, ACTION_FAILED, REASON_HANDLER_FAILED, NOT_CALLED)
            else:
                admitted.append(row)
        return admitted

    def run(self, rows: list[Row]) -> list[Result]:
        """Call the handler on `rows`: one Result per row, in order."""
        try:
            return run_handler(self.handler, [_message(r) for r in rows], self.timeout_s)
        except HandlerTimedOut as exc:
            self.blocked.update(_unit(r) for r in rows)
            return [Result.failure(str(exc))] * len(rows)


@dataclass
class Outcomes:
    """Report rows produced so far for one batch."""

    run_id: str
    rows: list[Row] = field(default_factory=list)

    def add(self, row: Row, action: str, reason: str | None = None, error: str | None = None,
            dead_letter_id: str | None = None) -> None:
        self.rows.append({
            "run_id": self.run_id, "stream": row["stream"], "group": row["group"],
            "id": row["id"], "previous_consumer": row.get("previous_consumer"),
            "delivery_count": row.get("delivery_count"), "idle_ms": row.get("idle_ms"),
            "action": action, "reason": reason, "error": error,
            "dead_letter_id": dead_letter_id,
        })


def apply_rows(client: redis.Redis, params: JobParams, rows: list[Row]) -> list[Row]:
    """Dead-letter, handle and ack one batch of routed rows; return their report rows."""
    out = Outcomes(params.run_id)
    by_route: dict[str, list[Row]] = defaultdict(list)
    for row in rows:
        by_route[row["route"]].append(row)
    for row in by_route[ROUTE_GONE]:
        out.add(row, ACTION_SKIPPED, REASON_GONE)
    _clear_deleted(client, by_route[ROUTE_DELETED], out)
    over_limit = [DeadLetterJob(r, REASON_OVER_LIMIT) for r in by_route[ROUTE_DEAD_LETTER]]
    _dead_letter(client, params, over_limit, out)
    _handle(client, params, by_route[ROUTE_HANDLE], out)
    return out.rows


def _clear_deleted(client: redis.Redis, rows: list[Row], out: Outcomes) -> None:
    """Report entries deleted upstream; ack those still in our PEL (Redis 6.2 keeps them)."""
    still_pending = [r for r in rows if r.get("delivery_count") is not None]
    _ack(client, still_pending)
    for row in rows:
        out.add(row, ACTION_DELETED, REASON_DELETED)


def _handle(client: redis.Redis, params: JobParams, rows: list[Row], out: Outcomes) -> None:
    """Hand `rows` over chunk by chunk: renew the lease, call, ack, dead-letter at the limit."""
    rows = _with_fields(client, rows, out)
    calls = HandlerCalls(load_handler(params.handler_path), params.handler_timeout_s)
    size = params.handler_batch_size
    for start in range(0, len(rows), size):
        leased = _lease(client, params, calls.admit(rows[start : start + size], out), out)
        if leased:
            results = calls.run(leased)
            _ack_succeeded(client, leased, results, out)
            _dead_letter(client, params, _failed(params, leased, results, out), out)


def _lease(client: redis.Redis, params: JobParams, rows: list[Row], out: Outcomes
           ) -> list[Row]:
    """Renew the job's lease on `rows`: return those to hand over; report the others."""
    fresh_ms = fresh_lease_ms(params.min_idle_ms, params.handler_timeout_s)
    status = _per_unit(client, rows, partial(renew_lease, fresh_ms=fresh_ms))
    leased = []
    for row in rows:
        reply = status[id(row)]
        if reply == LEASE_RENEWED:
            leased.append(row)
        elif reply == LEASE_DELETED:
            out.add(row, ACTION_DELETED, REASON_DELETED)
        elif reply == VANISHED:
            out.add(row, ACTION_SKIPPED, REASON_VANISHED)
        else:
            out.add(row, ACTION_SKIPPED, REASON_GONE)
    return leased


def _ack_succeeded(client: redis.Redis, rows: list[Row], results: list[Result],
                   out: Outcomes) -> None:
    """Ack the rows the handler succeeded on; report each."""
    succeeded = [r for r, res in zip(rows, results, strict=True) if res.ok]
    for row, reply in zip(succeeded, _ack(client, succeeded), strict=True):
        if reply == 1:
            out.add(row, ACTION_REPROCESSED)
        elif reply == VANISHED:
            out.add(row, ACTION_SKIPPED, "handled, but " + REASON_VANISHED + " before the ack")
        else:
            out.add(row, ACTION_SKIPPED, "handled, but " + REASON_GONE + " before the ack")


def _failed(params: JobParams, rows: list[Row], results: list[Result], out: Outcomes
            ) -> list[DeadLetterJob]:
    """Report failures below the limit (they stay pending); return those at the limit."""
    at_limit: list[DeadLetterJob] = []
    for row, res in zip(rows, results, strict=True):
        if res.ok:
            continue
        if row["delivery_count"] >= params.max_deliveries:
            at_limit.append(DeadLetterJob(row, REASON_FAILED_AT_LIMIT, res.error))
        else:
            out.add(row, ACTION_FAILED, REASON_HANDLER_FAILED, res.error)
    return at_limit


def _with_fields(client: redis.Redis, rows: list[Row], out: Outcomes) -> list[Row]:
    """Fetch fields of rows claimed by an earlier task attempt; report those deleted since."""
    missing = [r for r in rows if r["fields"] is None]
    if not missing:
        return rows
    fetched: dict[tuple[str, str], Any] = {}
    for stream, ids in _ids_by_stream(missing).items():
        try:
            for entry_id, fields in fetch_entries(client, stream, ids).items():
                fetched[(stream, entry_id)] = fields
        except redis.ResponseError as exc:
            if not unit_vanished(exc):
                raise
            fetched.update(((stream, i), VANISHED) for i in ids)
    gone = []
    for row in missing:
        fields = fetched[(row["stream"], row["id"])]
        if fields is None:
            gone.append(row)
        elif fields == VANISHED:
            out.add(row, ACTION_SKIPPED, REASON_VANISHED)
        else:
            row["fields"] = [{"name": k, "value": v} for k, v in fields]
    _clear_deleted(client, gone, out)
    return [r for r in rows if r["fields"] is not None]


def _ids_by_stream(rows: Iterable[Row]) -> dict[str, list[str]]:
    grouped: dict[str, list[str]] = defaultdict(list)
    for row in rows:
        grouped[row["stream"]].append(row["id"])
    return grouped


def _message(row: Row) -> Message:
    fields = [(f["name"], f["value"]) for f in row["fields"]]
    return Message(row["stream"], row["group"], row["id"], fields, int(row["delivery_count"]))


def _unit(row: Row) -> Unit:
    return row["stream"], row["group"], row["consumer"]


def _by_unit(rows: Iterable[Row]) -> dict[Unit, list[Row]]:
    grouped: dict[Unit, list[Row]] = defaultdict(list)
    for row in rows:
        grouped[_unit(row)].append(row)
    return grouped


def _ack(client: redis.Redis, rows: list[Row]) -> list[Any]:
    """Ack `rows` still pending and ours, one pipeline of script calls. Per row: 1 acked,
    0 left alone, VANISHED (stream or group gone)."""
    if not rows:
        return []
    replies = _per_unit(client, rows, ack_owned)
    return [replies[id(r)] for r in rows]


def _per_unit(client: redis.Redis, rows: list[Row], script: UnitScript) -> dict[int, Any]:
    """Call `script` once per unit, IDs ascending, all in one pipeline: reply per id(row)."""
    calls: list[ScriptCall] = []
    for (stream, group, consumer), unit_rows in _by_unit(rows).items():
        unit_rows.sort(key=lambda r: stream_id_key(r["id"]))
        ids = [r["id"] for r in unit_rows]
        calls.append((unit_rows, partial(script, client, stream, group, consumer, ids)))
    return {id(row): reply for row, reply in run_script_calls(client, calls)}


def _dead_letter(client: redis.Redis, params: JobParams, jobs: list[DeadLetterJob],
                 out: Outcomes) -> None:
    """Move `jobs` to their dead-letter streams, one pipeline of batched script calls."""
    if not jobs:
        return
    now_ms = int(time.time() * 1000)
    calls: list[ScriptCall] = []
    grouped: dict[Unit, list[DeadLetterJob]] = defaultdict(list)
    for job in jobs:
        grouped[(job.row["stream"], job.row["group"], job.row["consumer"])].append(job)
    for (stream, group, consumer), unit_jobs in grouped.items():
        ctx = DeadLetterContext(stream, group, consumer, dead_letter_key(stream, params.dlq_suffix),
                                params.run_id, params.max_deliveries, now_ms)
        for start in range(0, len(unit_jobs), params.dlq_batch_size):
            chunk = unit_jobs[start : start + params.dlq_batch_size]
            entries = [_dead_letter_entry(j) for j in chunk]
            calls.append((chunk, partial(dead_letter_batch, client, ctx, entries)))
    for job, status in run_script_calls(client, calls):
        _report_dead_letter(job, status, out)


def _dead_letter_entry(job: DeadLetterJob) -> DeadLetter:
    row = job.row
    return DeadLetter(row["id"], int(row["delivery_count"]), int(row.get("idle_ms") or 0),
                      row.get("previous_consumer"), job.reason, job.error)


def _report_dead_letter(job: DeadLetterJob, status: Any, out: Outcomes) -> None:
    if status == VANISHED:
        out.add(job.row, ACTION_SKIPPED, REASON_VANISHED, job.error)
    elif status == MOVED_TOO_BIG:
        out.add(job.row, ACTION_FAILED, REASON_TOO_BIG, job.error)
    elif status == MOVED_NOT_OURS:
        out.add(job.row, ACTION_SKIPPED, REASON_GONE, job.error)
    elif status == MOVED_DELETED:
        out.add(job.row, ACTION_DELETED, REASON_DELETED, job.error)
    else:
        dlq_id = status.decode() if isinstance(status, bytes) else str(status)
        out.add(job.row, ACTION_DEAD_LETTERED, job.reason, job.error, dlq_id)
