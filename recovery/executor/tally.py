"""What the tasks of a report pass did, counted on the executors and brought to the driver with
the report's own write: no second read of the report. Pure: no I/O.

Each task of a report pass counts its REPORT rows, and in a one-pass run the PEL histograms
its claim steps read, in a :class:`Tally`. Where Spark writes the report
(``recovery.report.run_report.write_report``), ``tallied`` appends the tally to the task's
rows as one *tally row* (report columns null, ``tally`` a JSON text), which an Observation
on the write collects and drops from what is written; Spark merges observed values of
successful task attempts only, as it keeps only their written rows, so the counts are those
of the rows written. Where the workers write the files (``recovery.report.worker_files``),
the tally is all a task hands Spark. (Reading the report rows back instead would cost a pass
over them.)
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.types import StringType, StructField, StructType

from recovery.errors import REQUEUE_REFUSED, TARGET_REFUSED
from recovery.executor.claim.backoff import NotDue
from recovery.executor.histogram import PelHistogram
from recovery.executor.packing import ArrowFn
from recovery.rows import AckedDeletions, AckedUnit, HistogramRow, UnitCounts
from recovery.schemas import REPORT, UNCERTAIN_REASON_PREFIX, Action, arrow

TALLY = "tally"
# What Spark's writer gets: REPORT rows (tally null) and one tally row per task (all else null).
TALLIED = StructType([StructField(f.name, f.dataType, True) for f in REPORT.fields]
                     + [StructField(TALLY, StringType(), True)])
TALLIED_ARROW = arrow(TALLIED)
UNIT_KEY = ("stream", "group")
ActionCounts = Counter[tuple[str, str, str]]  # (stream, group, action) -> report rows


class Tally:
    """One task's counts: report rows per (stream, group, action), PEL histograms per
    (stream, group) where the task counted them, and the entries a backoff schedule left
    alone per (stream, group) (``recovery.executor.claim.backoff.NotDue``)."""

    def __init__(self) -> None:
        self.actions: ActionCounts = Counter()
        self.histograms: dict[tuple[str, str], PelHistogram] = {}
        self.histogram_rows: list[HistogramRow] = []  # counted by an earlier stage
        self.not_due: dict[tuple[str, str], NotDue] = {}
        # Units whose dead-letter stream the move script refused -> the reason (one row's).
        self.refused: dict[tuple[str, str], str] = {}
        # reprocess.delete_acked: (stream, group, deleted) -> rows whose ack deleted the entry
        # (True) or kept it for another group (False): REPORT's entry_deleted.
        self.acked: Counter[tuple[str, str, bool]] = Counter()
        # (stream, group) -> skipped rows whose dead-letter move is uncertain (a resent call:
        # recovery.executor.handover.resent), reason starting UNCERTAIN_REASON_PREFIX.
        self.uncertain: Counter[tuple[str, str]] = Counter()

    def count(self, batch: pa.RecordBatch) -> None:
        """Count a REPORT batch's rows by (stream, group, action). A batch of one unit, as
        the claim steps make them, costs a few Arrow kernels, much less than a general
        group-by, which other batches take."""
        if not batch.num_rows:
            return
        self._gather_skipped(batch)
        self._count_acked(batch)
        stream, group = batch.column("stream"), batch.column("group")
        if pc.count_distinct(stream).as_py() == 1 and pc.count_distinct(group).as_py() == 1:
            unit = (stream[0].as_py(), group[0].as_py())
            for item in pc.value_counts(batch.column("action")).to_pylist():
                self.actions[(*unit, item["values"])] += item["counts"]
            return
        keys = [*UNIT_KEY, "action"]
        table = pa.Table.from_batches([batch.select(keys)])
        counted = table.group_by(keys, use_threads=False).aggregate([([], "count_all")])
        for row in counted.to_pylist():
            self.actions[(row["stream"], row["group"], row["action"])] += row["count_all"]

    def _count_acked(self, batch: pa.RecordBatch) -> None:
        """Count the rows whose ack deleted their entry or kept it (``entry_deleted`` set:
        reprocess.delete_acked), by unit."""
        if "entry_deleted" not in batch.schema.names:  # a batch of counts only (tests)
            return
        column = batch.column("entry_deleted")
        if column.null_count == len(column):
            return
        rows = batch.filter(pc.is_valid(column)).select([*UNIT_KEY, "entry_deleted"])
        for row in rows.to_pylist():
            self.acked[(row["stream"], row["group"], row["entry_deleted"])] += 1

    def _gather_skipped(self, batch: pa.RecordBatch) -> None:
        """Of `batch`'s skipped rows, note the units whose dead-letter stream was refused
        (reason starting ``TARGET_REFUSED``, or ``REQUEUE_REFUSED`` for a requeue target: the
        run's unit errors), and count those whose dead-letter move is uncertain (reason
        starting ``UNCERTAIN_REASON_PREFIX``)."""
        if "reason" not in batch.schema.names:  # a batch of counts only (tests)
            return
        skipped = pc.equal(batch.column("action"), Action.SKIPPED.value)
        if not pc.any(skipped).as_py():
            return
        reasons = pc.fill_null(batch.column("reason"), "")
        refused = pc.and_(skipped, pc.or_(pc.starts_with(reasons, TARGET_REFUSED),
                                          pc.starts_with(reasons, REQUEUE_REFUSED)))
        for row in _rows_of(batch, refused, ["stream", "group", "reason"]):
            self.refused.setdefault((row["stream"], row["group"]), row["reason"])
        uncertain = pc.and_(skipped, pc.starts_with(reasons, UNCERTAIN_REASON_PREFIX))
        for row in _rows_of(batch, uncertain, list(UNIT_KEY)):
            self.uncertain[(row["stream"], row["group"])] += 1

    def histogram(self, stream: str, group: str) -> PelHistogram:
        """The (new or growing) PEL histogram of one unit."""
        return self.histograms.setdefault((stream, group), PelHistogram())

    def waiting(self, stream: str, group: str) -> NotDue:
        """The (new or growing) count of one unit's entries not due yet."""
        return self.not_due.setdefault((stream, group), NotDue())

    def add_note(self, text: bytes) -> None:
        """Carry what the claim stage of a run whose claim is materialised counted for a
        unit (a ``note`` of this module): its PEL histogram row, or its entries not due."""
        note = json.loads(text)
        if "histogram" in note:
            self.histogram_rows.append(HistogramRow.from_mapping(note["histogram"]))
        if "not_due" in note:
            stream, group, entries, next_due_ms = note["not_due"]
            self.waiting(stream, group).merge(NotDue(entries, next_due_ms))

    def to_json(self) -> str:
        """``{"actions": [[stream, group, action, rows], ...], "histograms": [row, ...],
        "not_due": [[stream, group, entries, next due epoch ms or null], ...]}`` with
        PEL_HISTOGRAM-shaped rows (bucket lists as ``[label, entries]`` pairs)."""
        return json.dumps({
            "actions": [[*key, n] for key, n in self.actions.items()],
            "histograms": [*(h.row(s, g).as_dict() for (s, g), h in self.histograms.items()),
                           *(row.as_dict() for row in self.histogram_rows)],
            "not_due": [[*key, w.entries, w.next_due_ms] for key, w in self.not_due.items()],
            "refused": [[*key, reason] for key, reason in self.refused.items()],
            "acked": [[*key, n] for key, n in self.acked.items()],
            "uncertain": [[*key, n] for key, n in self.uncertain.items()],
        })


def _rows_of(batch: pa.RecordBatch, mask: pa.Array, columns: list[str]) -> list[dict[str, Any]]:
    """The `columns` of `batch`'s rows where `mask` holds, as dicts (none: no kernel more)."""
    if not pc.any(mask).as_py():
        return []
    return batch.filter(mask).select(columns).to_pylist()


def note(histogram: HistogramRow | None = None,
         not_due: tuple[str, str, NotDue] | None = None) -> bytes:
    """What a claim stage hands the next stage about a unit (``Tally.add_note``): its PEL
    histogram row and/or its entries not due."""
    body: dict[str, Any] = {}
    if histogram is not None:
        body["histogram"] = histogram.as_dict()
    if not_due is not None:
        stream, group, waiting = not_due
        body["not_due"] = [stream, group, waiting.entries, waiting.next_due_ms]
    return json.dumps(body).encode()


# A report pass, made per task: given the task's Tally (to add histograms to), the partition
# function that yields the pass's REPORT batches.
PassMaker = Callable[[Tally], ArrowFn]


def counted(make: PassMaker, tally: Tally, batches: Iterator[pa.RecordBatch]
            ) -> Iterator[pa.RecordBatch]:
    """The REPORT batches of the pass `make` makes for `tally`, run over `batches`, each
    counted into `tally` as it goes by (both writers count the same way)."""
    for batch in make(tally)(batches):
        tally.count(batch)
        yield batch


def tallied(make: PassMaker) -> ArrowFn:
    """The report pass `make` makes, as TALLIED batches for Spark's writer: its REPORT
    batches with a null ``tally`` column, followed by one tally row of what they held."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        tally = Tally()
        for batch in counted(make, tally, batches):
            yield pa.RecordBatch.from_arrays(
                [*batch.columns, pa.nulls(batch.num_rows, pa.string())], schema=TALLIED_ARROW)
        yield tally_row(tally.to_json())

    return run


def tally_row(text: str) -> pa.RecordBatch:
    """A one-row TALLIED batch: every report column null, ``tally`` = `text`."""
    columns = [*(pa.nulls(1, f.type) for f in list(TALLIED_ARROW)[:-1]), pa.array([text])]
    return pa.RecordBatch.from_arrays(columns, schema=TALLIED_ARROW)


Tallies = list[dict[str, Any]]  # the tasks' tallies, each as ``Tally.to_json`` describes


def read_tallies(texts: Iterable[str]) -> Tallies:
    """The tasks' tally texts, each read once (at 100,000 units a tally is megabytes, and
    the driver takes the counts, the entries not due and the histograms from it)."""
    return [json.loads(text) for text in texts]


def unit_counts(tallies: Tallies, actions: tuple[str, ...]) -> list[UnitCounts]:
    """Per (stream, group) rows of the merged tallies, sorted: each action's rows (every one
    of `actions`, and any other the tallies counted) and their ``total`` (over `actions`);
    only units that have report rows."""
    counts: ActionCounts = Counter()
    for tally in tallies:
        counts.update({(s, g, a): n for s, g, a, n in tally["actions"]})
    units: dict[tuple[str, str], dict[str, int]] = {}
    for (stream, group, action), n in counts.items():
        row = units.setdefault((stream, group), dict.fromkeys(actions, 0))
        row[action] = row.get(action, 0) + n
    return [UnitCounts(*key, units[key], sum(units[key][a] for a in actions))
            for key in sorted(units)]


def not_due_counts(tallies: Tallies) -> dict[tuple[str, str], NotDue]:
    """(stream, group) -> the entries a backoff schedule left alone, merged over the tasks
    (only units that had some, or were counted under a schedule)."""
    merged: dict[tuple[str, str], NotDue] = {}
    for tally in tallies:
        for stream, group, entries, next_due_ms in tally.get("not_due", []):
            merged.setdefault((stream, group), NotDue()).merge(NotDue(entries, next_due_ms))
    return merged


def refused_units(tallies: Tallies) -> dict[tuple[str, str], str]:
    """(stream, group) -> why its dead-letter stream was refused, over the tasks (the first
    reason of each unit; none when no move was refused)."""
    refused: dict[tuple[str, str], str] = {}
    for tally in tallies:
        for stream, group, reason in tally.get("refused", []):
            refused.setdefault((stream, group), reason)
    return refused


def acked_deletions(tallies: Tallies) -> AckedDeletions:
    """What reprocess.delete_acked did, over the tasks: per unit (sorted; only those with
    either) and in all, the entries whose ack also deleted them from their stream and those
    acked but kept because another consumer group still references them."""
    counts: Counter[tuple[str, str, bool]] = Counter()
    for tally in tallies:
        counts.update({(stream, group, deleted): n
                       for stream, group, deleted, n in tally.get("acked", [])})
    units = sorted({(stream, group) for stream, group, _ in counts})
    rows = tuple(AckedUnit(*key, counts[(*key, True)], counts[(*key, False)]) for key in units)
    return AckedDeletions(sum(r.deleted for r in rows), sum(r.kept for r in rows), rows)


def uncertain_moves(tallies: Tallies) -> int:
    """How many report rows, over the tasks, are skipped with an uncertain dead-letter move
    (``Tally.uncertain``)."""
    return sum(n for tally in tallies for _, _, n in tally.get("uncertain", []))


def histogram_rows(tallies: Tallies) -> list[HistogramRow]:
    """The histogram rows the tallies carry (one per unit, or per part of a split unit:
    add them up with ``histogram.merged_rows``; none without ``report.pel_histograms`` or in
    a dry run)."""
    return [HistogramRow.from_mapping(row) for tally in tallies for row in tally["histograms"]]
