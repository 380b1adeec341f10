"""Report files written by the Python workers (recovery.report.worker_files): what a run's directory
holds after a pass that succeeded and after one that failed, read back from disk."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession

from recovery.executor.handover.modes import ACTIONS
from recovery.executor.tally import unit_counts
from recovery.report.run_report import read_run, run_path, write_pass
from recovery.report.worker_files import STAGING, SUCCESS, TaskFile, local_directory
from recovery.schemas import REPORT_ARROW
from recovery.spark.transforms import units_of_parts


def report_rows(stream: str, n: int) -> list[dict]:
    return [{"stream": stream, "group": "g", "id": f"{i}-0", "action": "reprocessed"}
            for i in range(n)]


def as_batch(rows: list[dict]) -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist(rows, schema=REPORT_ARROW)


def streams_frame(spark: SparkSession, parts: list[list[str]]):
    return units_of_parts(spark, [[{"stream": s, "group": "g", "consumer": "c", "part": p}
                                   for s in streams] for p, streams in enumerate(parts)])


def test_local_directory_is_resolved_and_other_file_systems_are_left_to_spark(tmp_path):
    assert local_directory(str(tmp_path / "r")) == tmp_path / "r"
    assert local_directory(f"file://{tmp_path}/r") == tmp_path / "r"
    assert local_directory(f"file:{tmp_path}/r") == tmp_path / "r"  # Hadoop's own spelling
    assert local_directory("relative/r") == Path.cwd() / "relative" / "r"
    for remote in ("s3a://bucket/r", "hdfs://nn:8020/r", "abfss://c@a.dfs.core.windows.net/r"):
        assert local_directory(remote) is None


def test_a_task_file_gathers_batches_into_row_groups(tmp_path):
    out = TaskFile(tmp_path, "part.parquet")
    for start in range(0, 30, 10):
        out.add(as_batch(report_rows("s", 30)[start:start + 10]))
    assert out.close() == "part.parquet"
    written = pq.ParquetFile(tmp_path / "part.parquet")
    assert written.metadata.num_row_groups == 1
    assert written.read().column("id").to_pylist() == [f"{i}-0" for i in range(30)]
    assert TaskFile(tmp_path, "none.parquet").close() is None
    assert not (tmp_path / "none.parquet").exists()


@pytest.mark.slow
def test_a_pass_that_succeeds_leaves_each_task_s_rows_in_the_run_directory(spark, tmp_path):
    def fn(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for stream in [s for b in batches for s in b.column("stream").to_pylist()]:
            yield as_batch(report_rows(stream, 3))

    frame = streams_frame(spark, [["a", "b"], [], ["c"]])
    tallies = write_pass(frame, lambda _: fn, str(tmp_path), "r1", by_workers=True)
    assert len(tallies) == 3  # one per task, the empty one's too
    assert [(u["stream"], u["reprocessed"], u["total"]) for u in unit_counts(
        tallies, ACTIONS)] == [(s, 3, 3) for s in "abc"]
    run_dir = Path(run_path(str(tmp_path), "r1"))
    assert not (run_dir / STAGING).exists()
    assert (run_dir / SUCCESS).exists()
    assert len(list(run_dir.glob("part-*.parquet"))) == 2  # the empty task wrote no file
    rows = read_run(spark, str(tmp_path), "r1").collect()
    assert sorted((r.stream, r.id) for r in rows) == sorted(
        (s, f"{i}-0") for s in "abc" for i in range(3))


AIRFLOW_RUN_ID = "scheduled__2026-12-02T02:09:23.395718+00:00"


@pytest.mark.slow
@pytest.mark.parametrize("by_workers", [True, False], ids=["workers-write", "spark-writer"])
def test_every_row_carries_the_scheduler_run_id_whichever_writer(spark, tmp_path, by_workers):
    """The report passes leave ``scheduler_run_id`` null; either writer fills in the run's
    (null when none was given). Read as a user reads every run at once: ``run_id`` from the
    paths, ``scheduler_run_id`` from the rows, to join with the scheduler's runs."""
    def fn(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for stream in [s for b in batches for s in b.column("stream").to_pylist()]:
            yield as_batch(report_rows(stream, 3))

    frame = streams_frame(spark, [["a", "b"], ["c"]])
    write_pass(frame, lambda _: fn, str(tmp_path), "r1", by_workers, AIRFLOW_RUN_ID)
    write_pass(frame, lambda _: fn, str(tmp_path), "r2", by_workers)
    rows = spark.read.parquet(f"{tmp_path}/entries").collect()
    assert sorted(Counter((r.run_id, r.scheduler_run_id) for r in rows).items(),
                  key=str) == [(("r1", AIRFLOW_RUN_ID), 9), (("r2", None), 9)]


@pytest.mark.slow
def test_a_pass_that_fails_leaves_no_report_and_no_staging(spark, tmp_path):
    """One task (so no other task can still be writing when the driver cleans up), which
    fails after it has written rows."""

    def fn(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        list(batches)
        yield as_batch(report_rows("s", 150_000))  # past a row group: on disk already
        raise RuntimeError("this task fails")

    with pytest.raises(Exception, match="this task fails"):
        write_pass(streams_frame(spark, [["s"]]), lambda _: fn, str(tmp_path), "r2",
                   by_workers=True)
    run_dir = Path(run_path(str(tmp_path), "r2"))
    assert not list(run_dir.glob("*.parquet"))
    assert not (run_dir / STAGING).exists()
    assert not (run_dir / SUCCESS).exists()


@pytest.mark.slow
def test_an_empty_run_still_gets_its_directory(spark, tmp_path):
    def fn(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        list(batches)
        yield from ()

    tallies = write_pass(streams_frame(spark, [[]]), lambda _: fn, str(tmp_path), "r3",
                         by_workers=True)
    assert len(tallies) == 1 and unit_counts(tallies, ACTIONS) == []
    assert Path(run_path(str(tmp_path), "r3")).is_dir()
    assert read_run(spark, str(tmp_path), "r3").count() == 0
