"""The REPORT row, defined once by name (``recovery.schemas.ReportRow``) and built by name
wherever report batches are made: the hand-over's ``RoutedBatch.report`` and the dry run's
plan rows (``recovery.executor.survey``). Pure Arrow, no Redis, no Spark session.

Each test gives every column a value of its own, so a column filled from another (two
string columns swapped, which the schema alone would let through) fails."""

from __future__ import annotations

import types
from typing import get_type_hints

import pytest
from pyspark.sql.types import BooleanType, LongType, StringType

from recovery.executor.claimed import Claimed
from recovery.executor.handover.routed import RoutedBatch
from recovery.executor.survey import _plan_row
from recovery.params import JobParams, RedisParams, Unit
from recovery.schemas import (
    OUTCOME_COLUMNS,
    REPORT,
    REPORT_ARROW,
    ReportRow,
    report_batch,
    report_rows,
    stamped,
)

SPARK_TYPE = {str: StringType(), int: LongType(), bool: BooleanType()}


def _own_values() -> dict[str, object]:
    """Each column's value: its own name for a string column, True for a boolean one (the
    only boolean, entry_deleted, null by default), a distinct number else."""
    numbers = iter(range(11, 100))
    return {f.name: f.name if f.dataType == StringType() else
            True if f.dataType == BooleanType() else next(numbers) for f in REPORT.fields}


def test_the_row_is_the_schema_by_name_type_and_nullability():
    hints = get_type_hints(ReportRow)
    assert ReportRow._fields == tuple(REPORT.fieldNames())
    for f in REPORT.fields:
        hint = hints[f.name]
        nullable = isinstance(hint, types.UnionType) and type(None) in hint.__args__
        base = next(a for a in hint.__args__ if a is not type(None)) if nullable else hint
        assert (f.name, SPARK_TYPE[base], nullable) == (f.name, f.dataType, f.nullable)


@pytest.mark.parametrize("mode_columns", [(), ("requeued_id",), ("reassigned_to",)])
def test_the_hand_over_fills_each_column_from_its_own_name(mode_columns):
    """The outcome goes in `outcome` and in the mode's own columns of OUTCOME_COLUMNS (the
    requeue mode's `requeued_id`, the reassign mode's `reassigned_to`), none other."""
    assert OUTCOME_COLUMNS == ("requeued_id", "reassigned_to")
    values = _own_values()
    claimed = Claimed.of_unit(Unit(str(values["stream"]), str(values["group"]), "c"),
                              [str(values["id"])], [False], [str(values["previous_consumer"])],
                              [values["idle_ms"]], [[(b"f", b"v")]],  # type: ignore[list-item]
                              [values["delivery_count"]])  # type: ignore[list-item]
    rb = RoutedBatch(claimed, max_deliveries=1000)
    rb.set(0, **{name: values[name] for name in ("action", "reason", "error",  # type: ignore[arg-type]
                                                  "dead_letter_id", "outcome",
                                                  "entry_deleted")})
    batch = rb.report(mode_columns)
    assert batch.schema == REPORT_ARROW
    expected = values | {name: values["outcome"] if name in mode_columns else None
                         for name in OUTCOME_COLUMNS}
    assert batch.to_pylist() == [{**expected, "scheduler_run_id": None}]  # the writers' column
    assert stamped(batch, "airflow-run").to_pylist() == \
        [{**expected, "scheduler_run_id": "airflow-run"}]


def test_the_dry_run_fills_each_column_from_its_own_name():
    params = JobParams(run_id="r", redis=RedisParams("redis://x"), min_idle_ms=1, count=10,
                       max_deliveries=1000, dlq_suffix=":dlq", dlq_batch_size=10,
                       handler_path="", handler_batch_size=10)
    pel_row = [b"1-0", b"owner", 7, 2]  # ID, OWNER, IDLE, COUNT
    row = _plan_row(params, "s", "g", "1-0", pel_row, [(b"f", b"v")])
    assert report_rows([row]).to_pylist() == [{
        "stream": "s", "group": "g", "id": "1-0", "previous_consumer": "owner",
        "delivery_count": 3, "idle_ms": 7, "action": "would_reprocess", "reason": None,
        "error": None, "dead_letter_id": None, "requeued_id": None, "reassigned_to": None,
        "entry_deleted": None, "outcome": None, "scheduler_run_id": None}]


def test_rows_and_columns_build_the_same_batch():
    values = _own_values()
    by_rows = report_rows([ReportRow(**values)])  # type: ignore[arg-type]
    by_columns = report_batch({name: [value] for name, value in values.items()})
    assert by_rows.equals(by_columns) and by_rows.to_pylist() == [values]
    assert report_rows([]).num_rows == 0


def test_a_batch_may_leave_the_scheduler_run_id_to_the_writers():
    values = _own_values()
    del values["scheduler_run_id"]
    batch = report_batch({name: [value] for name, value in values.items()})
    assert batch.to_pylist() == [{**values, "scheduler_run_id": None}]


@pytest.mark.parametrize("change", ["missing", "unknown"])
def test_a_batch_needs_exactly_the_reports_columns(change):
    columns: dict[str, list[object]] = {name: [None] for name in ReportRow._fields}
    if change == "missing":
        del columns["reason"]
    else:
        columns["reasons"] = [None]
    with pytest.raises(ValueError, match="reason"):
        report_batch(columns)
