"""A run that applies a plan (``--plan``): each unit's planned entries claimed by ID, page by
page, as ``recovery.executor.claim.loop`` claims idle entries (same ClaimStep shape, so the
journal, gather, lease, hand-over and report downstream are the same).

Each page of planned IDs (ascending, ``claim.count`` of them) is one MULTI
(``recovery.redis_io.streams.claim_ids``): the XPENDING rows of the page's ID range as found
(last owner, idle time, delivery count), then ``XCLAIM ... <plan's min_idle_ms> id...``. The
min-idle guard leaves alone what a live consumer took since the plan. Each planned ID of
the page then is, by what the read found:

- claimed: handed over (its delivery count: the row's plus this claim);
- already the job consumer's (an earlier attempt of this task claimed it, or an earlier send
  of this very MULTI whose reply was lost: re-sent, its XCLAIM finds the entry not idle):
  taken back, in a step of its own without a claim time, as ``claim.py`` takes back;
- pending and idle enough but not claimed: deleted upstream (7.0+ drops it from the PEL at
  the claim; Redis 6.2 claims it and replies nil, so it is the job's and its slot is acked);
- owned by another consumer and not idle enough, or no longer pending: left alone, reported
  ``skipped`` with a note saying which.

Past a read cut short by ``rows_read`` (a range crowded with entries that are not planned),
each remaining ID is read on its own after the MULTI. Every entry carries its planned delivery
count: the report says where the current count differs (``recovery.executor.handover.routed``).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from itertools import groupby, islice

import pyarrow as pa
import redis

from recovery.counts import saturated
from recovery.executor.claim.loop import OWN_PAGE, ClaimStep
from recovery.executor.claim.throttle import Throttle
from recovery.executor.claimed import Claimed, field_pairs
from recovery.executor.faults import maybe_fail
from recovery.params import JobParams, Unit
from recovery.redis_io.redis_conn import RedisConn
from recovery.redis_io.round_trips import each
from recovery.redis_io.streams import (
    COUNT,
    ID,
    IDLE,
    OWNER,
    IdClaim,
    PendingRow,
    claim_ids,
    pending_command,
    pending_pages,
    shown,
    stream_id_key,
)

Planned = tuple[str, int | None]  # a planned entry: its ID and the plan's delivery count
ROWS_SLACK = 64  # XPENDING rows read per page beyond twice its planned IDs
NOT_PENDING = ("no longer pending since the plan (acked by a consumer or by an earlier attempt "
               "of this task, or its consumer deleted): left alone")


def planned_units(batches: Iterator[pa.RecordBatch]) -> Iterator[tuple[Unit, Iterator[Planned]]]:
    """The units of PLANNED batches (sorted by stream, group and ID), each with its planned
    entries, read lazily: consume a unit's entries before asking for the next unit. A task
    holds one part (one job consumer), as a normal run's does: its journal is that part's."""
    rows = (row for batch in batches for row in batch.to_pylist())
    consumer = None
    for key, unit_rows in groupby(rows, key=lambda r: (r["stream"], r["group"], r["consumer"])):
        if consumer not in (None, key[2]):  # the driver's routing keys failed (driver.plan)
            raise RuntimeError(f"two parts in one task: {consumer} and {key[2]}")
        consumer = key[2]
        yield Unit(*key), ((r["id"], r["delivery_count"]) for r in unit_rows)


def plan_steps(conn: RedisConn, params: JobParams, unit: Unit, planned: Iterable[Planned],
               throttle: Throttle) -> Iterator[ClaimStep]:
    """The unit's planned entries claimed by ID, a page (``params.count`` IDs) per MULTI, as
    ClaimSteps: each page's claimed, deleted and left-alone entries with the moment the
    claim was sent, then, if any, the entries taken back (no claim time)."""
    entries = iter(planned)
    step = 0
    while page := list(islice(entries, params.count)):
        sent_at = time.monotonic()
        ids = [entry_id for entry_id, _ in page]
        with conn.errors(unit.stream, unit.group):
            claim = claim_ids(conn.client, unit, params.min_idle_ms, ids,
                              2 * len(ids) + ROWS_SLACK)
            rows = _rows_of(conn.client, unit, ids, claim, params.min_idle_ms)
        step += 1
        now, taken_back = _page_steps(unit, params.min_idle_ms, page, claim, rows)
        if len(now):
            yield ClaimStep(now, sent_at)
        if len(taken_back):
            yield ClaimStep(taken_back, None)
        maybe_fail("claim", step)
        throttle.take(len(page))


def _rows_of(client: redis.Redis, unit: Unit, ids: list[str], claim: IdClaim,
             min_idle_ms: int) -> dict[bytes, PendingRow]:
    """Each planned ID's PEL row as the claim's read found it; for IDs past a read cut
    short, as read on their own now (after the claim: a claimed one shows its new count).
    On Redis 6.2, when more entries came back nil than the read shows deleted (one became
    idle enough within the MULTI), the job consumer's own rows of the range as they are now."""
    rows = dict(claim.rows)
    if not claim.complete:
        last = stream_id_key(max((r[ID].decode() for r in rows.values()), key=stream_id_key))
        unknown = [i for i in ids if stream_id_key(i) > last]
        replies = each(client, [pending_command(unit.stream, unit.group, i, i, 1)
                                for i in unknown])
        rows.update({r[0][ID]: r[0] for r in replies if r})  # type: ignore[index]
    claimed = set(claim.ids)
    if claim.nils > len(_deleted(unit, rows, claimed, min_idle_ms)):
        for page in pending_pages(client, unit.stream, unit.group, OWN_PAGE, unit.consumer,
                                  start=ids[0], end=ids[-1]):
            rows.update({r[ID]: r for r in page if r[ID] not in claimed})
    return rows


def _deleted(unit: Unit, rows: dict[bytes, PendingRow], claimed: set[bytes],
             min_idle_ms: int) -> set[bytes]:
    """IDs found pending and idle enough, not the job consumer's, yet not claimed: deleted
    upstream (XCLAIM dropped them, or, on 6.2, replied nil)."""
    mine = unit.consumer.encode()
    return {i for i, r in rows.items()
            if i not in claimed and r[OWNER] != mine and int(r[IDLE]) >= min_idle_ms}


def _page_steps(unit: Unit, min_idle_ms: int, page: list[Planned], claim: IdClaim,
                rows: dict[bytes, PendingRow]) -> tuple[Claimed, Claimed]:
    """The page as two batches of entries in ID order: those claimed, deleted or left alone
    now, and those taken back (already the job consumer's)."""
    fields = dict(zip(claim.ids, field_pairs(claim.flats), strict=True))
    deleted = _deleted(unit, rows, set(claim.ids), min_idle_ms)
    mine = unit.consumer.encode()
    now, back = _Columns(unit), _Columns(unit)
    for entry_id, planned in page:
        key = entry_id.encode()
        row = rows.get(key)
        if key in fields:
            # The claim's own read shows the count before it; a later read, after it.
            count = None if row is None else \
                saturated(int(row[COUNT]) + (1 if key in claim.rows else 0))
            now.add(entry_id, planned, row, fields[key], count)
        elif key in deleted:
            now.add(entry_id, planned, row, None, saturated(int(row[COUNT]) + 1), deleted=True)  # type: ignore[index]
        elif row is not None and row[OWNER] == mine:
            back.add(entry_id, planned, None, None, saturated(int(row[COUNT])))
        else:
            now.add(entry_id, planned, row, None, None, note=_left_alone(row, min_idle_ms))
    return now.claimed(), back.claimed()


def _left_alone(row: PendingRow | None, min_idle_ms: int) -> str:
    """Why a planned entry that is not the job's was not claimed."""
    if row is None:
        return NOT_PENDING
    return (f"picked up by consumer {shown(row[OWNER])} since the plan (idle {row[IDLE]} ms, "
            f"under the plan's min_idle_ms {min_idle_ms}): left alone")


class _Columns:
    """Claimed columns of one unit's entries, added one at a time."""

    def __init__(self, unit: Unit) -> None:
        self.unit = unit
        self.ids: list[str] = []
        self.deleted: list[bool] = []
        self.previous: list[str | None] = []
        self.idle: list[int | None] = []
        self.fields: list[list[tuple[bytes, bytes]] | None] = []
        self.counts: list[int | None] = []
        self.planned: list[int | None] = []
        self.notes: list[str | None] = []

    def add(self, entry_id: str, planned: int | None, row: PendingRow | None,
            fields: list[tuple[bytes, bytes]] | None, count: int | None,
            deleted: bool = False, note: str | None = None) -> None:
        """One entry: `row` its PEL row as found (None: not shown), `count` its delivery
        count now (None: not the job's)."""
        self.ids.append(entry_id)
        self.deleted.append(deleted)
        self.previous.append(shown(row[OWNER]) if row is not None else None)
        self.idle.append(int(row[IDLE]) if row is not None else None)
        self.fields.append(fields)
        self.counts.append(count)
        self.planned.append(planned)
        self.notes.append(note)

    def __len__(self) -> int:
        return len(self.ids)

    def claimed(self) -> Claimed:
        entries = Claimed.of_unit(self.unit, self.ids, self.deleted, self.previous, self.idle,
                                  self.fields, self.counts)
        entries.planned_count, entries.note = self.planned, self.notes
        entries.add_carried(range(len(entries)))  # a requeued copy's carried deliveries
        return entries
