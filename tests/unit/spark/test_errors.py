"""A failed Spark action mapped back to the job's typed error (recovery.spark.errors): the
RecoveryError an executor raised is found in the text Spark carries back (a Python worker's
traceback inside a Py4J error), keeping its class, so its exit code; anything else becomes
one line naming the Python cause. Pure: the texts as Spark writes them."""

from __future__ import annotations

import pytest

from recovery.errors import EXIT_BAD_INPUT, ConfigError, RecoveryError, StreamUnitError
from recovery.spark.errors import from_spark_error, spark_errors

WORKER_TRACE = """An error occurred while calling o123.checkpoint.
: org.apache.spark.SparkException: Job aborted due to stage failure: Task 0 in stage 2.0
  File "/work/recovery/executor/partitions.py", line 88, in recover_partition
recovery.errors.{name}: {message}

\tat org.apache.spark.api.python.BasePythonRunner$ReaderIterator.handlePythonException"""


def test_the_executors_typed_error_comes_back_with_its_class_and_exit_code() -> None:
    """Catches a typed error flattened to the generic one (a bad config exiting 1, not 2)."""
    found = from_spark_error(RuntimeError(WORKER_TRACE.format(
        name="ConfigError", message="handler.path: no module named 'x'; fix the path")))
    assert type(found) is ConfigError and found.exit_code == EXIT_BAD_INPUT
    assert str(found) == "handler.path: no module named 'x'; fix the path"


def test_a_name_that_is_no_recovery_error_and_other_failures_are_one_generic_line() -> None:
    """Catches a class looked up by name that is not a RecoveryError (``EXIT_OK``, or a
    constructor of another shape) being raised, and a stack trace in place of one line."""
    for name in ("EXIT_OK", "NoSuchError"):
        assert type(from_spark_error(RuntimeError(WORKER_TRACE.format(
            name=name, message="x")))) is RecoveryError
    other = from_spark_error(RuntimeError(
        "Job aborted\n  File \"x.py\", line 3\nValueError: bad batch\n\tat org.apache"))
    assert type(other) is RecoveryError
    assert str(other) == "the Spark job failed: ValueError: bad batch"
    assert str(from_spark_error(RuntimeError("\n\n  lost executor 2  \n"))) == \
        "the Spark job failed: lost executor 2"


def test_spark_errors_passes_a_typed_error_through_and_maps_the_rest() -> None:
    unit = StreamUnitError("no-group", "s", "g", "NOGROUP")
    with pytest.raises(StreamUnitError) as kept, spark_errors():
        raise unit
    assert kept.value is unit
    with pytest.raises(RecoveryError, match="the Spark job failed: boom"), spark_errors():
        raise OSError("boom")
