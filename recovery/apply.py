"""What happens to routed entries on an executor: dead-letter moves, handler calls, acks.

Works on plain rows (dicts with the columns of ``schemas.ROUTED``) and returns report rows
(dicts with the columns of ``schemas.REPORT``). Round trips are per batch of rows, not per
entry: every script call of a step goes into one pipeline.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import redis

from recovery.config import JobParams
from recovery.dlq_names import dead_letter_key
from recovery.handlers import Message, Result, load_handler, run_handler
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
    MOVED_DELETED,
    MOVED_NOT_OURS,
    DeadLetter,
    DeadLetterContext,
    ack_owned,
    dead_letter_batch,
)
from recovery.streams import fetch_entries

Row = dict[str, Any]
Unit = tuple[str, str, str]  # stream, group, job consumer

REASON_OVER_LIMIT = "max-deliveries-exceeded"
REASON_FAILED_AT_LIMIT = "handler-failed-at-limit"
REASON_GONE = "no longer pending for the job's consumer (acked or claimed by another consumer)"
REASON_DELETED = "entry deleted from the stream upstream; only its PEL slot was left"


@dataclass
class DeadLetterJob:
    """A row waiting to be dead-lettered, with the reason and the handler's error."""

    row: Row
    reason: str
    error: str | None = None


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
    to_dead_letter = [DeadLetterJob(r, REASON_OVER_LIMIT) for r in by_route[ROUTE_DEAD_LETTER]]
    to_dead_letter += _handle(client, params, by_route[ROUTE_HANDLE], out)
    _dead_letter(client, params, to_dead_letter, out)
    return out.rows


def _clear_deleted(client: redis.Redis, rows: list[Row], out: Outcomes) -> None:
    """Report entries deleted upstream; ack those still in our PEL (Redis 6.2 keeps them)."""
    still_pending = [r for r in rows if r.get("delivery_count") is not None]
    _ack(client, still_pending)
    for row in rows:
        out.add(row, ACTION_DELETED, REASON_DELETED)


def _handle(client: redis.Redis, params: JobParams, rows: list[Row], out: Outcomes
            ) -> list[DeadLetterJob]:
    """Run the handler over `rows`; ack successes; return failures that hit the limit."""
    rows = _with_fields(client, rows, out)
    handler = load_handler(params.handler_path)
    results: list[Result] = []
    size = params.handler_batch_size
    for start in range(0, len(rows), size):
        chunk = rows[start : start + size]
        results += run_handler(handler, [_message(r) for r in chunk])
    succeeded = [r for r, res in zip(rows, results, strict=True) if res.ok]
    acked = _ack(client, succeeded)
    for row, was_acked in zip(succeeded, acked, strict=True):
        if was_acked:
            out.add(row, ACTION_REPROCESSED)
        else:
            out.add(row, ACTION_SKIPPED, "handled, but " + REASON_GONE + " before the ack")
    at_limit: list[DeadLetterJob] = []
    for row, res in zip(rows, results, strict=True):
        if res.ok:
            continue
        if row["delivery_count"] >= params.max_deliveries:
            at_limit.append(DeadLetterJob(row, REASON_FAILED_AT_LIMIT, res.error))
        else:
            out.add(row, ACTION_FAILED, "handler failed; stays pending for the next run",
                    res.error)
    return at_limit


def _with_fields(client: redis.Redis, rows: list[Row], out: Outcomes) -> list[Row]:
    """Fetch fields of rows claimed by an earlier task attempt; report those deleted since."""
    missing = [r for r in rows if r["fields"] is None]
    if not missing:
        return rows
    fetched: dict[tuple[str, str], Any] = {}
    for stream, ids in _ids_by_stream(missing).items():
        for entry_id, fields in fetch_entries(client, stream, ids).items():
            fetched[(stream, entry_id)] = fields
    gone = []
    for row in missing:
        fields = fetched[(row["stream"], row["id"])]
        if fields is None:
            gone.append(row)
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


def _by_unit(rows: Iterable[Row]) -> dict[Unit, list[Row]]:
    grouped: dict[Unit, list[Row]] = defaultdict(list)
    for row in rows:
        grouped[(row["stream"], row["group"], row["consumer"])].append(row)
    return grouped


def _ack(client: redis.Redis, rows: list[Row]) -> list[bool]:
    """Ack `rows` still pending and ours, one pipeline of script calls. True per acked row."""
    if not rows:
        return []
    grouped = _by_unit(rows)
    pipe = client.pipeline(transaction=False)
    for (stream, group, consumer), unit_rows in grouped.items():
        ack_owned(client, stream, group, consumer, [r["id"] for r in unit_rows], pipe=pipe)
    acked: dict[int, bool] = {}
    for unit_rows, reply in zip(grouped.values(), pipe.execute(), strict=True):
        for row, flag in zip(unit_rows, reply, strict=True):
            acked[id(row)] = bool(flag)
    return [acked[id(r)] for r in rows]


def _dead_letter(client: redis.Redis, params: JobParams, jobs: list[DeadLetterJob],
                 out: Outcomes) -> None:
    """Move `jobs` to their dead-letter streams, one pipeline of batched script calls."""
    if not jobs:
        return
    now_ms = int(time.time() * 1000)
    calls: list[list[DeadLetterJob]] = []
    pipe = client.pipeline(transaction=False)
    grouped: dict[Unit, list[DeadLetterJob]] = defaultdict(list)
    for job in jobs:
        grouped[(job.row["stream"], job.row["group"], job.row["consumer"])].append(job)
    for (stream, group, consumer), unit_jobs in grouped.items():
        ctx = DeadLetterContext(stream, group, consumer, dead_letter_key(stream, params.dlq_suffix),
                                params.run_id, params.max_deliveries, now_ms)
        for start in range(0, len(unit_jobs), params.dlq_batch_size):
            chunk = unit_jobs[start : start + params.dlq_batch_size]
            dead_letter_batch(client, ctx, [_dead_letter_entry(j) for j in chunk], pipe=pipe)
            calls.append(chunk)
    for chunk, reply in zip(calls, pipe.execute(), strict=True):
        for job, status in zip(chunk, reply, strict=True):
            _report_dead_letter(job, status, out)


def _dead_letter_entry(job: DeadLetterJob) -> DeadLetter:
    row = job.row
    return DeadLetter(row["id"], int(row["delivery_count"]), int(row.get("idle_ms") or 0),
                      row.get("previous_consumer"), job.reason, job.error)


def _report_dead_letter(job: DeadLetterJob, status: Any, out: Outcomes) -> None:
    if status == MOVED_NOT_OURS:
        out.add(job.row, ACTION_SKIPPED, REASON_GONE, job.error)
    elif status == MOVED_DELETED:
        out.add(job.row, ACTION_DELETED, REASON_DELETED, job.error)
    else:
        dlq_id = status.decode() if isinstance(status, bytes) else str(status)
        out.add(job.row, ACTION_DEAD_LETTERED, job.reason, job.error, dlq_id)
