"""The plain description of a run (``recovery.report.summary``): the JSON line its readers
know, key for key, from the typed rows it holds; the log table; the failure ratio; and a
summary read and built without Spark or Redis loaded."""

from __future__ import annotations

import json

from recovery.report.summary import FAILED, REPROCESSED, RunSummary, format_table
from recovery.rows import (
    AckedDeletions,
    AckedUnit,
    DeadLetterWarning,
    FailedErrors,
    Skipped,
    UnitCounts,
)
from recovery.schemas import Action
from tests.support.fresh_modules import among, run_fresh


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
    code = ("from recovery.report.summary import RunSummary\n"
            "from recovery.rows import UnitCounts\n"
            "s = RunSummary('r', units=[UnitCounts('s', 'g', {'failed': 1}, 1)])\n"
            "print(s.json_line())")
    (line,), _, modules = run_fresh(code)
    assert json.loads(line)["units"] == [{"stream": "s", "group": "g", "failed": 1, "total": 1}]
    assert among(modules, ("pyspark", "py4j", "redis", "pydantic", "pyarrow")) == []
