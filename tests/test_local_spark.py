"""The local sessions that PySpark starts itself run their JVM as ``recovery.local_spark``
says (C1 only: a short local run's JVM otherwise spends much of its CPU in the C2 compiler)."""

from __future__ import annotations

from pathlib import Path

from pyspark.sql import SparkSession

from recovery.local_spark import LOCAL_JVM_OPTIONS


def jvm_command_line(spark: SparkSession) -> list[str]:
    """The arguments of the session's JVM process, from /proc (the JVM's own view)."""
    pid = spark.sparkContext._gateway.proc.pid  # type: ignore[union-attr]
    return Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")


def test_the_test_session_jvm_runs_with_the_local_options(spark):
    args = jvm_command_line(spark)
    assert args[0].endswith("java")
    assert all(option in args for option in LOCAL_JVM_OPTIONS.split())
