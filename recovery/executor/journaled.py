"""Claim steps journaled in Redis, so that claim and hand-over can be one pass on a master that
may run a task more than once (``recovery.redis_io.journal``).

A task appends to its part's journal each claim step's entry IDs before the step is handed
over (so before any of its side effects; the steps of one hand-over in one RPUSH), and each
hand-over's REPORT rows (Arrow IPC, zstd) once it is done. A retried attempt reads the journal once and claims as its failed attempt
did (the claim loop takes back what the job consumer still owns). After each unit's loop it
hands over, as one more step, the journal's other entries of that unit: the failed attempt
claimed them and they are no longer the job's (handled and acked, dead-lettered, requeued or
reassigned by it, or acked by a consumer since). Without a delivery count they are reported
skipped, no longer pending; ``amended`` then puts back the row an earlier attempt recorded
for each that has one (all but those of a hand-over killed between a side effect and its
record). So every entry any attempt claimed is in the kept attempt's report exactly once.

One job consumer per task (a part, ``recovery.driver.discovery.assign``), so one journal.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import pyarrow as pa
import redis

from recovery.errors import StreamUnitError
from recovery.executor.claim import ClaimStep
from recovery.executor.claimed import Claimed
from recovery.params import JobParams, Unit
from recovery.redis_io.journal import Earlier, journal_key, read, record_claims, record_outcome
from recovery.redis_io.redis_conn import redis_errors
from recovery.redis_io.streams import stream_id_key
from recovery.schemas import REPORT_ARROW

IPC_OPTIONS = pa.ipc.IpcWriteOptions(compression="zstd")
RowKey = tuple[str, str, str]  # (stream, group, entry ID)


class TaskJournal:
    """One task's use of its part's journal: what earlier attempts journaled (read on first
    use), this attempt's claim steps and hand-overs, recorded as they come."""

    def __init__(self, params: JobParams, prefix: str) -> None:
        self.params, self.prefix = params, prefix
        self._key: str | None = None
        self._earlier: Earlier | None = None
        self._rows: dict[RowKey, dict[str, Any]] | None = None  # earlier attempts' rows
        self._recorded: dict[RowKey, dict[str, Any]] = {}  # rows to put back (`amended`)
        self._unrecorded: list[tuple[tuple[str, str], list[str]]] = []  # steps, see `recorded`

    def steps(self, client: redis.Redis, unit: Unit, steps: Iterable[ClaimStep]
              ) -> Iterator[ClaimStep]:
        """`steps` of `unit`, each to be recorded (by :meth:`recorded`) before it is handed
        over; then, as one more step, the unit's entries earlier attempts claimed that these
        steps did not (also when the unit's stream or group vanished meanwhile)."""
        self._key = journal_key(self.prefix, unit.consumer)
        earlier = self._read(client).claimed.pop((unit.stream, unit.group), set())
        try:
            for step in steps:
                self._unrecorded.append(((unit.stream, unit.group), step.claimed.id))
                earlier.difference_update(step.claimed.id)
                yield step
        except StreamUnitError:
            yield from self._no_longer_ours(unit, earlier)
            raise
        yield from self._no_longer_ours(unit, earlier)

    def recorded(self, client: redis.Redis, steps: Iterable[ClaimStep]) -> Iterator[ClaimStep]:
        """`steps` (hand-overs, each gathered from the unit steps :meth:`steps` passed on),
        each passed on only once the claim steps it holds are in the journal: all recorded in
        one RPUSH, before any side effect of the hand-over."""
        for step in steps:
            if self._unrecorded:
                assert self._key is not None
                with redis_errors(self.params.redis):
                    record_claims(client, self._key, self._unrecorded)
                self._unrecorded = []
            yield step

    def done(self, client: redis.Redis, report: pa.RecordBatch) -> None:
        """Record a hand-over's REPORT batch (after its side effects)."""
        if self._key is not None and report.num_rows:
            with redis_errors(self.params.redis):
                record_outcome(client, self._key, to_ipc(report))

    def amended(self, reports: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """`reports`, each row of an entry an earlier attempt finished replaced by the row
        that attempt recorded for it (the last one, if several)."""
        for report in reports:
            if not self._recorded:
                yield report
                continue
            rows = report.to_pylist()
            keys = [(r["stream"], r["group"], r["id"]) for r in rows]
            if not any(k in self._recorded for k in keys):
                yield report
                continue
            yield pa.RecordBatch.from_pylist(
                [self._recorded.pop(k, r) for k, r in zip(keys, rows, strict=True)],
                schema=REPORT_ARROW)

    def _read(self, client: redis.Redis) -> Earlier:
        if self._earlier is None:
            assert self._key is not None
            with redis_errors(self.params.redis):
                self._earlier = read(client, self._key)
        return self._earlier

    def _no_longer_ours(self, unit: Unit, ids: set[str]) -> Iterator[ClaimStep]:
        """One step of `ids` (if any), ascending, with nothing known of them but their IDs;
        the rows earlier attempts recorded for them are kept for ``amended``."""
        if not ids:
            return
        rows = self._earlier_rows()
        for entry_id in ids:
            key = (unit.stream, unit.group, entry_id)
            if key in rows:
                self._recorded[key] = rows[key]
        n = len(ids)
        yield ClaimStep(Claimed.of_unit(unit, sorted(ids, key=stream_id_key), [False] * n,
                                        [None] * n, [None] * n, [None] * n, [None] * n), None)

    def _earlier_rows(self) -> dict[RowKey, dict[str, Any]]:
        """Every row earlier attempts recorded, the last per entry (decoded once)."""
        if self._rows is None:
            assert self._earlier is not None
            self._rows = {(r["stream"], r["group"], r["id"]): r
                          for outcome in self._earlier.outcomes
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
