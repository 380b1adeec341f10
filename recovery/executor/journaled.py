"""Claim steps journaled in Redis, so that claim and hand-over can be one pass on a master that
may run a task more than once (``recovery.redis_io.journal``).

For each claim step the task appends to its part's journal, in this order: the step's entry
IDs, before the step is handed over (so before any of its side effects); then, once the
hand-over is done, the step's REPORT rows (Arrow IPC, zstd). A retried attempt reads the
journal once and claims as its failed attempt did (the claim loop takes back what the job
consumer still owns). After each unit's loop it reports the journal's other entries of that
unit, which the failed attempt claimed and which are no longer the job's: with the row that
attempt recorded, or, for a step it did not finish recording (killed between a side effect
and the record), as skipped, no longer pending. So every entry any attempt claimed is in the
kept attempt's report exactly once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

import pyarrow as pa
import redis

from recovery.errors import StreamUnitError
from recovery.executor.claim import ClaimStep
from recovery.executor.claimed import Claimed
from recovery.params import JobParams, Unit
from recovery.redis_io.journal import Earlier, journal_key, read, record_claim, record_outcome
from recovery.redis_io.redis_conn import redis_errors
from recovery.redis_io.streams import stream_id_key
from recovery.schemas import REPORT_ARROW

Done = Callable[[pa.RecordBatch], None]  # called with each step's REPORT batch once it is done
HandOver = Callable[[Iterable[ClaimStep], Done], Iterator[pa.RecordBatch]]
IPC_OPTIONS = pa.ipc.IpcWriteOptions(compression="zstd")


class TaskJournal:
    """One task's use of its part's journal: what earlier attempts journaled (read on first
    use, per job consumer), and this attempt's steps, recorded as they come."""

    def __init__(self, params: JobParams, prefix: str) -> None:
        self.params, self.prefix = params, prefix
        self._earlier: dict[str, dict[tuple[str, str], Earlier]] = {}  # consumer -> journal

    def reports(self, client: redis.Redis, unit: Unit, steps: Iterable[ClaimStep],
                hand_over: HandOver) -> Iterator[pa.RecordBatch]:
        """REPORT batches of `unit`: `hand_over` of `steps`, each step journaled before and
        after; then the unit's entries earlier attempts claimed that these steps did not
        (also when the unit's stream or group vanished meanwhile)."""
        key = journal_key(self.prefix, unit.consumer)
        earlier = self._read(client, key).pop((unit.stream, unit.group), Earlier())

        def journaled() -> Iterator[ClaimStep]:
            for step in steps:
                with redis_errors(self.params.redis, unit.stream, unit.group):
                    record_claim(client, key, (unit.stream, unit.group), step.claimed.id)
                earlier.ids.difference_update(step.claimed.id)
                yield step

        def done(report: pa.RecordBatch) -> None:
            with redis_errors(self.params.redis, unit.stream, unit.group):
                record_outcome(client, key, (unit.stream, unit.group), to_ipc(report))

        try:
            yield from hand_over(journaled(), done)
        except StreamUnitError:
            yield from _no_longer_ours(unit, earlier, hand_over, done)
            raise
        yield from _no_longer_ours(unit, earlier, hand_over, done)

    def _read(self, client: redis.Redis, key: str) -> dict[tuple[str, str], Earlier]:
        consumer = key[len(self.prefix):]
        if consumer not in self._earlier:
            with redis_errors(self.params.redis):
                self._earlier[consumer] = read(client, key)
        return self._earlier[consumer]


def _no_longer_ours(unit: Unit, earlier: Earlier, hand_over: HandOver, done: Done
                    ) -> Iterator[pa.RecordBatch]:
    """The report of entries earlier attempts claimed that this one did not: the last row an
    attempt recorded for each; the rest handed over without a delivery count (reported
    skipped, no longer pending), ascending by ID."""
    if not earlier.ids:
        return
    rows = _recorded_rows(earlier)
    found = [rows[i] for i in sorted(earlier.ids & rows.keys(), key=stream_id_key)]
    if found:
        yield pa.RecordBatch.from_pylist(found, schema=REPORT_ARROW)
    rest = sorted(earlier.ids - rows.keys(), key=stream_id_key)
    if rest:
        n = len(rest)
        gone = Claimed.of_unit(unit, rest, [False] * n, [None] * n, [None] * n, [None] * n,
                               [None] * n)
        yield from hand_over([ClaimStep(gone, None)], done)


def _recorded_rows(earlier: Earlier) -> dict[str, dict[str, Any]]:
    """Entry ID -> the last REPORT row earlier attempts recorded for it, among `earlier.ids`."""
    rows: dict[str, dict[str, Any]] = {}
    for outcome in earlier.outcomes:
        for row in from_ipc(outcome).to_pylist():
            if row["id"] in earlier.ids:
                rows[row["id"]] = row
    return rows


def to_ipc(batch: pa.RecordBatch) -> bytes:
    """`batch` as Arrow IPC stream bytes, zstd-compressed."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema, options=IPC_OPTIONS) as writer:
        writer.write_batch(batch)
    return bytes(sink.getvalue().to_pybytes())


def from_ipc(data: bytes) -> pa.Table:
    """What ``to_ipc`` wrote, as a table."""
    return pa.ipc.open_stream(data).read_all()
