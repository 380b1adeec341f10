"""Claim steps journaled in Redis, so that claim and hand-over can be one pass on a master that
may run a task more than once (``recovery.redis_io.journal``).

A task appends to its part's journal each claim step's entry IDs before the step is handed
over (so before any of its side effects; the steps of one hand-over in one RPUSH), and each
hand-over's REPORT rows (Arrow IPC, zstd) once it is done. A retried attempt reads the
journal once and claims as its failed attempt did (the claim loop takes back what the job
consumer still owns). After each unit's loop it hands over, as one more step, the journal's
other entries of that unit: the failed attempt claimed them and they are no longer the job's
(handled and acked, dead-lettered, requeued or reassigned by it, or acked by a consumer
since). Without a delivery count they are reported skipped, no longer pending; ``amended``
then puts back the row an earlier attempt recorded for each, where that row still holds
(``_keep_rows``): not for an entry claimed again after it (by an attempt killed between a
side effect and its record), nor a ``failed`` row (it left the entry pending on the job's
consumer, where it no longer is). A plan's step holds such entries too (planned IDs left
alone, without a delivery count): their rows are put back the same way. So every entry any
attempt claimed is in the kept attempt's report exactly once, as Redis now has it.

One job consumer per task (a part, ``recovery.driver.discovery.assign``), so one journal.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import pyarrow as pa

from recovery.errors import StreamUnitError
from recovery.executor.claim.loop import ClaimStep
from recovery.executor.claimed import Claimed
from recovery.params import Unit
from recovery.redis_io.journal import Earlier, journal_key, read, record_claims, record_outcome
from recovery.redis_io.redis_conn import RedisConn
from recovery.redis_io.streams import stream_id_key
from recovery.schemas import REPORT_ARROW, Action

IPC_OPTIONS = pa.ipc.IpcWriteOptions(compression="zstd")
RowKey = tuple[str, str, str]  # (stream, group, entry ID)


class TaskJournal:
    """One task's use of its part's journal: what earlier attempts journaled (read on first
    use), this attempt's claim steps and hand-overs, recorded as they come."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self._key: str | None = None
        self._earlier: Earlier | None = None
        self._rows: dict[RowKey, tuple[int, dict[str, Any]]] | None = None  # earlier rows
        self._recorded: dict[RowKey, dict[str, Any]] = {}  # rows to put back (`amended`)
        self._unrecorded: list[tuple[tuple[str, str], list[str]]] = []  # steps, see `recorded`

    def steps(self, conn: RedisConn, unit: Unit, steps: Iterable[ClaimStep]
              ) -> Iterator[ClaimStep]:
        """`steps` of `unit`, each to be recorded (by :meth:`recorded`) before it is handed
        over; then, as one more step, the unit's entries earlier attempts claimed that these
        steps did not (also when the unit's stream or group vanished meanwhile)."""
        self._key = journal_key(self.prefix, unit.consumer)
        earlier = self._read(conn).claimed.pop((unit.stream, unit.group), {})
        try:
            for step in steps:
                self._unrecorded.append(((unit.stream, unit.group), step.claimed.id))
                if earlier:
                    self._settle(unit, step.claimed, earlier)
                yield step
        except StreamUnitError:
            yield from self._no_longer_ours(unit, earlier)
            raise
        yield from self._no_longer_ours(unit, earlier)

    def recorded(self, conn: RedisConn, steps: Iterable[ClaimStep]) -> Iterator[ClaimStep]:
        """`steps` (hand-overs, each gathered from the unit steps :meth:`steps` passed on),
        each passed on only once the claim steps it holds are in the journal: all recorded in
        one RPUSH, before any side effect of the hand-over."""
        for step in steps:
            if self._unrecorded:
                assert self._key is not None
                with conn.errors():
                    record_claims(conn.client, self._key, self._unrecorded)
                self._unrecorded = []
            yield step

    def done(self, conn: RedisConn, report: pa.RecordBatch) -> None:
        """Record a hand-over's REPORT batch (after its side effects), as ``amended`` will
        pass it on: a later attempt then finds the rows this one put back, not the
        ``skipped`` rows they replace."""
        if self._key is not None and report.num_rows:
            with conn.errors():
                record_outcome(conn.client, self._key, to_ipc(self._amend(report, keep=True)))

    def amended(self, reports: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """`reports`, each row of an entry an earlier attempt finished replaced by the row
        that attempt recorded for it (the last one, if several; where it still holds)."""
        for report in reports:
            yield self._amend(report, keep=False)

    def _amend(self, report: pa.RecordBatch, keep: bool) -> pa.RecordBatch:
        """`report` with the rows kept for ``amended`` put in; without `keep`, they are
        then forgotten (each is put in once)."""
        if not self._recorded:
            return report
        rows = report.to_pylist()
        keys = [(r["stream"], r["group"], r["id"]) for r in rows]
        if not any(k in self._recorded for k in keys):
            return report
        take = self._recorded.get if keep else self._recorded.pop
        return pa.RecordBatch.from_pylist(
            [take(k, r) for k, r in zip(keys, rows, strict=True)], schema=REPORT_ARROW)

    def _read(self, conn: RedisConn) -> Earlier:
        if self._earlier is None:
            assert self._key is not None
            with conn.errors():
                self._earlier = read(conn.client, self._key)
        return self._earlier

    def _settle(self, unit: Unit, claimed: Claimed, earlier: dict[str, int]) -> None:
        """Drop `claimed`'s entries from `earlier` (ID -> position of its last claim in the
        journal): this attempt reports them. For those it holds neither claimed (no fields)
        nor taken back (no delivery count) nor deleted, no longer the job's (a plan's
        planned IDs left alone), keep the rows earlier attempts recorded, where they still
        hold (``_keep_rows``)."""
        not_ours = []
        for entry_id, count, fields, deleted in zip(claimed.id, claimed.delivery_count,
                                                    claimed.fields, claimed.deleted,
                                                    strict=True):
            claimed_at = earlier.pop(entry_id, None)
            if claimed_at is not None and count is None and fields is None and not deleted:
                not_ours.append((entry_id, claimed_at))
        self._keep_rows(unit, not_ours)

    def _no_longer_ours(self, unit: Unit, earlier: dict[str, int]) -> Iterator[ClaimStep]:
        """One step of `earlier`'s IDs (if any), ascending, with nothing known of them but
        their IDs; the rows earlier attempts recorded for them are kept for ``amended``
        where they still hold."""
        if not earlier:
            return
        self._keep_rows(unit, earlier.items())
        n = len(earlier)
        yield ClaimStep(Claimed.of_unit(unit, sorted(earlier, key=stream_id_key), [False] * n,
                                        [None] * n, [None] * n, [None] * n, [None] * n), None)

    def _keep_rows(self, unit: Unit, entries: Iterable[tuple[str, int]]) -> None:
        """For each of `unit`'s `entries` (ID, position of its last claim in the journal),
        no longer the job's consumer's: keep for ``amended`` the last row an earlier attempt
        recorded for it, if that row still holds. It does not when it was recorded before
        the entry's last claim (an attempt took the entry again and was killed before its
        record: what it did is unknown), nor when it says ``failed`` (the entry stayed
        pending on the job's consumer, and is no longer there). Such an entry keeps the row
        it has: skipped, no longer pending."""
        rows = self._earlier_rows()
        for entry_id, claimed_at in entries:
            key = (unit.stream, unit.group, entry_id)
            found = rows.get(key)
            if found is not None and found[0] > claimed_at and \
                    found[1]["action"] != Action.FAILED:
                self._recorded[key] = found[1]

    def _earlier_rows(self) -> dict[RowKey, tuple[int, dict[str, Any]]]:
        """Every row earlier attempts recorded, the last per entry, with its outcome's
        position in the journal (decoded once)."""
        if self._rows is None:
            assert self._earlier is not None
            self._rows = {(r["stream"], r["group"], r["id"]): (at, r)
                          for at, outcome in self._earlier.outcomes
                          for r in from_ipc(outcome).to_pylist()}
        return self._rows


def to_ipc(batch: pa.RecordBatch) -> bytes:
    """`batch` as Arrow IPC stream bytes, zstd-compressed."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema, options=IPC_OPTIONS) as writer:
        writer.write_batch(batch)
    return bytes(sink.getvalue().to_pybytes())


def from_ipc(data: bytes) -> pa.Table:
    """What ``to_ipc`` wrote, as a table."""
    return pa.ipc.open_stream(data).read_all()
