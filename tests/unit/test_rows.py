"""The typed rows (``recovery.rows``): each writes the mapping the job has always written (the
JSON summary's keys and values, the HEALTH and PEL_HISTOGRAM columns) and reads like it, by
key, as a dict and in pandas."""

from __future__ import annotations

import json

import pandas as pd
import pyarrow as pa
import pytest

from recovery.rows import (
    ConsumerHealth,
    HealthRow,
    HistogramRow,
    RedriveUnit,
    Skipped,
    UnitCounts,
)
from recovery.schemas import HEALTH, PEL_HISTOGRAM, SCHEDULER_RUN_ID, arrow

HEALTH_ROW = HealthRow("orders", "billing", 158, None, 166,
                       (ConsumerHealth("c1", 160, 5000, 4000), ConsumerHealth("c2", 6, 10)),
                       dead_letter_length=3, oldest_idle_ms=3_600_000,
                       deliveries=(("1", 148), ("4-5", 18)), idle_ages=(("1h-1d", 166),))


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
    """The row's mapping has exactly HEALTH's columns but the one the writer stamps
    (``scheduler_run_id``), and Arrow takes it as is."""
    assert sorted(HEALTH_ROW.as_dict()) == sorted(set(HEALTH.fieldNames())
                                                  - {SCHEDULER_RUN_ID.name})
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
