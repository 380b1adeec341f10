"""The typed rows (``recovery.rows``) and the plain run description they fill
(``recovery.report.summary``): each row writes the mapping the job has always written (the
JSON summary's keys and values, the HEALTH and PEL_HISTOGRAM columns), reads like it by key,
and a summary can be read and built without Spark or Redis loaded."""

from __future__ import annotations

import json
import subprocess
import sys

import pandas as pd
import pyarrow as pa
import pytest

from recovery.report.summary import FAILED, REPROCESSED, RunSummary, format_table
from recovery.rows import (
    AckedDeletions,
    AckedUnit,
    ConsumerHealth,
    DeadLetterWarning,
    FailedErrors,
    HealthRow,
    HistogramRow,
    RedriveUnit,
    Skipped,
    UnitCounts,
)
from recovery.schemas import HEALTH, PEL_HISTOGRAM, Action, arrow

HEALTH_ROW = HealthRow("orders", "billing", 158, None, 166,
                       (ConsumerHealth("c1", 160, 5000, 4000), ConsumerHealth("c2", 6, 10)),
                       dead_letter_length=3, oldest_idle_ms=3_600_000,
                       deliveries=(("1", 148), ("4-5", 18)), idle_ages=(("1h-1d", 166),))


def test_a_summary_writes_the_json_line_its_readers_know() -> None:
    """Key for key and value for value the line schedulers and scripts read: typed rows
    become the mappings they stand for (a renamed field or a dropped key fails here)."""
    summary = RunSummary("r1", totals={"reprocessed": 2, "failed": 1}, duration_s=1.5)
    summary.units = [UnitCounts("s", "g", {"reprocessed": 2, "failed": 1}, 3, not_due=0,
                                pending_after=1, after_read=True)]
    summary.skipped = [Skipped("k", None, "not a stream")]
    summary.dead_letter_warnings = [DeadLetterWarning("s", "{s}:dlq", "length", 3, 2)]
    summary.failed_errors = [FailedErrors("handler-failed", "boom <n>", 1, "boom 7")]
    summary.acked_deletions = AckedDeletions(1, 0, (AckedUnit("s", "g", 1, 0),))
    line = json.loads(summary.json_line())
    assert {k: line[k] for k in ("units", "skipped", "dead_letter_warnings", "failed_errors",
                                 "acked_deletions", "totals")} == {
        "units": [{"stream": "s", "group": "g", "reprocessed": 2, "failed": 1, "total": 3,
                   "not_due": 0, "next_due_ms": None, "pending_after": 1}],
        "skipped": [{"stream": "k", "group": None, "reason": "not a stream"}],
        "dead_letter_warnings": [{"stream": "s", "dead_letter_stream": "{s}:dlq",
                                  "warning": "length", "value": 3, "threshold": 2}],
        "failed_errors": [{"reason": "handler-failed", "signature": "boom <n>", "entries": 1,
                           "example": "boom 7"}],
        "acked_deletions": {"deleted": 1, "kept": 0, "units": [
            {"stream": "s", "group": "g", "deleted": 1, "kept": 0}]},
        "totals": {"reprocessed": 2, "failed": 1},
    }
    assert "unit_health" not in line and "after" not in line
    assert summary.json_line().startswith('{"acked_deletions":{"deleted":1,"kept":0,"units":[{')


def test_unit_rows_carry_the_backoff_and_after_keys_only_when_known() -> None:
    plain = UnitCounts("s", "g", {"reprocessed": 1}, 1)
    assert plain.as_dict() == {"stream": "s", "group": "g", "reprocessed": 1, "total": 1}
    read = UnitCounts("s", "g", {"reprocessed": 1}, 1, after_read=True)
    assert read.as_dict()["pending_after"] is None  # read, the unit's PEL gone: null
    assert (plain.entries("failed"), plain["reprocessed"], plain.get("not_due", "-")) == (
        0, 1, "-")


def test_rows_read_by_key_like_the_mappings_they_replace() -> None:
    """Scripts that read a summary's rows as dicts keep working: by key, compared with a
    dict, turned into one, and in pandas (as the notebook does) with flat action columns."""
    assert Skipped("k", None, "gone") == {"stream": "k", "group": None, "reason": "gone"}
    units = [UnitCounts("s", "g", {"reprocessed": 2, "failed": 1}, 3)]
    assert dict(units[0]) == {"stream": "s", "group": "g", "reprocessed": 2, "failed": 1,
                              "total": 3}
    frame = pd.DataFrame(units, columns=["stream", "group", "reprocessed", "failed"])
    assert frame.to_dict("records") == [{"stream": "s", "group": "g", "reprocessed": 2,
                                         "failed": 1}]
    assert (HEALTH_ROW["stream"], HEALTH_ROW.get("lag"), HEALTH_ROW.get("nothing", 0)) == (
        "orders", None, 0)
    assert [c["name"] for c in HEALTH_ROW["consumers"]] == ["c1", "c2"]
    assert RedriveUnit("s", "{s}:dlq", 3, 2, 2, 0)["redriven"] == 2
    with pytest.raises(KeyError):
        HEALTH_ROW["as_dict"]  # a method is no key


def test_a_health_row_is_a_health_file_row() -> None:
    """The row's mapping has exactly HEALTH's columns, and Arrow takes it as is."""
    assert sorted(HEALTH_ROW.as_dict()) == sorted(HEALTH.fieldNames())
    (written,) = pa.Table.from_pylist([HEALTH_ROW.as_dict()], schema=arrow(HEALTH)).to_pylist()
    assert written["deliveries"] == [("1", 148), ("4-5", 18)]
    assert written["consumers"][0] == {"name": "c1", "pending": 160, "idle_ms": 5000,
                                       "inactive_ms": 4000}
    histogram = HistogramRow("orders", "billing", (("2", 1),), (("<1m", 1),), 9)
    assert HEALTH_ROW.with_histogram(histogram).deliveries == (("2", 1),)
    assert HEALTH_ROW.with_histogram(None).as_dict()["deliveries"] == {}


def test_a_histogram_row_survives_a_tally_and_spark() -> None:
    """Through JSON (a task's tally) and through Spark's map columns (a survey pass)."""
    row = HistogramRow("s", "g", (("1", 3), (">100", 1)), (("<1m", 4),), 120, ("1-1", "2-1"))
    assert HistogramRow.from_mapping(json.loads(json.dumps(row.as_dict()))) == row
    batch = pa.RecordBatch.from_pylist([row.as_dict()], schema=arrow(PEL_HISTOGRAM))
    (back,) = batch.to_pylist()
    spark_like = {**back, "deliveries": dict(back["deliveries"]),
                  "idle_ages": dict(back["idle_ages"])}
    assert HistogramRow.from_mapping(spark_like) == HistogramRow(
        "s", "g", row.deliveries, row.idle_ages, 120)
    assert "given" not in HistogramRow("s", "g").as_dict()


def test_the_log_table_reads_typed_rows() -> None:
    summary = RunSummary("r1", totals={"reprocessed": 2, "failed": 1})
    summary.units = [UnitCounts("s", "g", {"reprocessed": 2, "failed": 1}, 3)]
    summary.skipped = [Skipped("k", "g2", "gone")]
    assert format_table(summary).splitlines() == [
        "stream  group  reprocessed  failed  total",
        "s       g      2            1       3    ",
        "TOTAL          2            1       3    ",
        "skipped k / g2: gone",
    ]


def test_the_failure_ratio_reads_the_report_actions() -> None:
    assert (Action.FAILED.value, Action.REPROCESSED.value) == (FAILED, REPROCESSED)
    assert RunSummary("r", totals={FAILED: 1, REPROCESSED: 3}).failed_ratio() == 0.25
    assert RunSummary("r").failed_ratio() == 0.0


def test_a_summary_is_read_and_built_without_spark_or_redis() -> None:
    """The description of a run loads neither Spark, py4j, Redis nor the settings model."""
    code = ("import json, sys\nfrom recovery.report.summary import RunSummary\n"
            "from recovery.rows import UnitCounts\n"
            "s = RunSummary('r', units=[UnitCounts('s', 'g', {'failed': 1}, 1)])\n"
            "print(s.json_line())\nprint(json.dumps(sorted(sys.modules)))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    line, modules = done.stdout.splitlines()
    assert json.loads(line)["units"] == [{"stream": "s", "group": "g", "failed": 1, "total": 1}]
    heavy = ("pyspark", "py4j", "redis", "pydantic", "pyarrow")
    assert [m for m in json.loads(modules) if m.split(".")[0] in heavy] == []
