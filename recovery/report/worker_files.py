"""The report written by the Python workers themselves, with pyarrow, for one-pass runs and
the per-key ordered hand-over whose report directory is on the local file system.

Spark's own writer (``recovery.report.run_report.write_report``) turns every report row from Arrow
into a JVM row and then into Parquet, a large share of the job's CPU (docs/PERFORMANCE.md,
"Report files from the workers"). Here each task
writes its REPORT batches straight to one Parquet file and hands Spark only its tally and
that file's name.

Files appear the way Spark's own commit makes them appear: each task writes under
``<run dir>/_staging/`` (names starting with ``_`` are skipped by Parquet readers), and
only once every task has succeeded does the driver move the files into the run's
directory. A failed run removes its staging directory; a killed one leaves it behind,
unread, as Spark leaves ``_temporary``. Each file is one task attempt's whole output; a
retried task writes a new one, and only the attempt Spark keeps hands its name to the
driver, so a failed attempt's file is never moved in.
"""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlparse

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark import TaskContext
from pyspark.sql import DataFrame
from pyspark.sql.types import StringType, StructField, StructType

from recovery.executor.packing import ArrowFn
from recovery.executor.tally import TALLY, PassMaker, Tally, counted
from recovery.schemas import REPORT_ARROW, arrow, stamped

STAGING = "_staging"
SUCCESS = "_SUCCESS"
FILE = "file"
# What a task hands Spark: its tally row, and the name of its file (null when it wrote none).
FILED = StructType([StructField(TALLY, StringType(), True), StructField(FILE, StringType(), True)])
FILED_ARROW = arrow(FILED)
ROW_GROUP_ROWS = 100_000  # rows per Parquet row group (~5 MB of report rows)


def local_directory(path: str) -> Path | None:
    """The absolute local directory `path` names (no scheme, ``file:/...`` or
    ``file:///...``); None for any other file system (``s3a://``, ``hdfs://``...), which
    only Spark's writer reaches."""
    parsed = urlparse(path)
    if parsed.scheme == "":
        return Path(path).resolve()
    return Path(parsed.path).resolve() if parsed.scheme == "file" else None


class TaskFile:
    """One Parquet file, `directory` / `name`, opened on the first rows (`directory` must
    exist); REPORT batches are gathered into row groups of ROW_GROUP_ROWS rows."""

    def __init__(self, directory: Path, name: str) -> None:
        self.directory, self.name = directory, name
        self._writer: pq.ParquetWriter | None = None
        self._held: list[pa.RecordBatch] = []
        self._rows = 0

    def add(self, batch: pa.RecordBatch) -> None:
        """Take a REPORT batch (schema REPORT_ARROW)."""
        if batch.num_rows:
            self._held.append(batch)
            self._rows += batch.num_rows
            if self._rows >= ROW_GROUP_ROWS:
                self._flush()

    def close(self) -> str | None:
        """Write what is held and close the file; its name, or None when it got no rows."""
        self._flush()
        if self._writer is None:
            return None
        self._writer.close()
        return self.name

    def _flush(self) -> None:
        if not self._held:
            return
        if self._writer is None:  # in a directory the driver made: see write_by_workers
            self._writer = pq.ParquetWriter(str(self.directory / self.name), REPORT_ARROW)
        self._writer.write_table(pa.Table.from_batches(self._held, REPORT_ARROW))
        self._held, self._rows = [], 0


def written(make: PassMaker, staging: Path, scheduler_run_id: str | None = None) -> ArrowFn:
    """The report pass `make` makes, its REPORT rows written to a file of the task's own in
    `staging`, each with `scheduler_run_id`; it yields one FILED row (the task's tally and
    file name)."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        tally = Tally()
        out = TaskFile(staging, task_file_name())
        for batch in counted(make, tally, batches):
            out.add(stamped(batch, scheduler_run_id))
        yield pa.RecordBatch.from_pydict({TALLY: [tally.to_json()], FILE: [out.close()]},
                                         schema=FILED_ARROW)

    return run


def task_file_name() -> str:
    """``part-<Spark partition, 5 digits>-<random hex>.parquet`` (partition 0 outside a
    Spark task)."""
    context = TaskContext.get()
    part = context.partitionId() if context is not None else 0
    return f"part-{part:05d}-{uuid.uuid4().hex}.parquet"


def write_by_workers(frame: DataFrame, make: PassMaker, run_dir: Path,
                     scheduler_run_id: str | None = None) -> list[str]:
    """Run the report pass `make` makes over `frame`, its workers writing the REPORT files
    (each row with `scheduler_run_id`); then move them into `run_dir` (which exists
    afterwards, even for an empty run). Returns the tallies (JSON texts, one per task)."""
    staging = run_dir / STAGING
    # Made here, not by the tasks: a task still running when a failed run removes it (Spark
    # kills the others' tasks without waiting for them) then fails to open its file instead
    # of leaving a new staging directory behind.
    staging.mkdir(parents=True, exist_ok=True)
    try:
        rows = frame.mapInArrow(written(make, staging, scheduler_run_id), FILED).collect()
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    commit(staging, run_dir, [row[FILE] for row in rows if row[FILE]])
    return [row[TALLY] for row in rows]


def write_by_driver(table: pa.Table, run_dir: Path) -> None:
    """Write a small `table` (schema as given) as one Parquet file in `run_dir` from the
    driver, visible at once and whole (written under a ``_`` name, then renamed), then mark
    the directory complete: a few rows need no Spark job."""
    run_dir.mkdir(parents=True, exist_ok=True)
    name = f"part-00000-{uuid.uuid4().hex}.parquet"
    pq.write_table(table, str(run_dir / f"_{name}"))
    (run_dir / f"_{name}").rename(run_dir / name)
    (run_dir / SUCCESS).touch()


def commit(staging: Path, run_dir: Path, names: list[str]) -> None:
    """Move the named files from `staging` into `run_dir`, remove `staging`, and mark the
    directory complete with an empty ``_SUCCESS``, as Spark's commit does (schedulers'
    sensors wait for it). `run_dir` exists: `staging` is in it."""
    for name in names:
        (staging / name).rename(run_dir / name)
    shutil.rmtree(staging, ignore_errors=True)
    (run_dir / SUCCESS).touch()
