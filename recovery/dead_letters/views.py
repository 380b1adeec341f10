"""Pure DataFrame logic of dead letters: typed times, error signatures
(:func:`recovery.report.signatures.signature`) and the grouped views. No I/O here."""

from __future__ import annotations

from collections.abc import Callable

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import StringType

from recovery.report.signatures import signature

Transform = Callable[[DataFrame], DataFrame]

EXAMPLE = "example"


def with_death_time() -> Transform:
    """DEAD_LETTER rows with ``death_time``, a timestamp, after ``death_time_ms``."""

    def add(df: DataFrame) -> DataFrame:
        at = df.columns.index("death_time_ms") + 1
        time = F.timestamp_millis(F.col("death_time_ms")).alias("death_time")
        return df.select(*df.columns[:at], time, *df.columns[at:])

    return add


def with_scheduler_run_id(scheduler_run_id: str | None) -> Transform:
    """Any rows with a last column ``scheduler_run_id`` (a string): the scheduler's own id
    of the run (``--scheduler-run-id``) on every row, null when none was given."""

    def add(df: DataFrame) -> DataFrame:
        return df.withColumn("scheduler_run_id", F.lit(scheduler_run_id).cast(StringType()))

    return add


def causes() -> Transform:
    """Dead letters (with ``death_time``) -> one row per (dead_letter_key, source_stream,
    group, death_reason, signature): ``dead_letters`` (count), ``without_metadata`` (rows
    without an x-original-stream), ``first_death_time``, ``last_death_time`` and one
    ``example`` (struct: death_time_ms, dead_letter_key, dead_letter_id, exception_message).
    Small: both views and the summary are built from it, so Redis is read once."""

    def group(df: DataFrame) -> DataFrame:
        example = F.struct("death_time_ms", "dead_letter_key", "dead_letter_id",
                           "exception_message")
        return (df.withColumn("signature", signature(F.col("exception_message")))
                .groupBy("dead_letter_key", "source_stream", "group", "death_reason",
                         "signature")
                .agg(F.count(F.lit(1)).alias("dead_letters"),
                     F.sum(F.col("source_stream").isNull().cast("long")).alias(
                         "without_metadata"),
                     F.min("death_time").alias("first_death_time"),
                     F.max("death_time").alias("last_death_time"),
                     F.min(example).alias(EXAMPLE)))

    return group


def _rolled_up(keys: list[str]) -> Transform:
    def roll(df: DataFrame) -> DataFrame:
        return (df.groupBy(*keys)
                .agg(F.sum("dead_letters").alias("dead_letters"),
                     F.min("first_death_time").alias("first_death_time"),
                     F.max("last_death_time").alias("last_death_time"),
                     F.min(EXAMPLE).alias(EXAMPLE))
                .select(*keys, "dead_letters", "first_death_time", "last_death_time",
                        F.col(f"{EXAMPLE}.dead_letter_key").alias("example_dead_letter_key"),
                        F.col(f"{EXAMPLE}.dead_letter_id").alias("example_dead_letter_id"),
                        F.col(f"{EXAMPLE}.exception_message").alias("example_message"))
                .orderBy(F.desc("dead_letters"), *keys))

    return roll


def by_reason() -> Transform:
    """``causes`` rows -> one per (source_stream, group, death_reason): ``dead_letters``,
    ``first_death_time``, ``last_death_time`` and an example (``example_dead_letter_key``,
    ``example_dead_letter_id``, ``example_message``), most dead letters first."""
    return _rolled_up(["source_stream", "group", "death_reason"])


def by_signature() -> Transform:
    """``causes`` rows -> one per error ``signature`` (null: no exception message), with the
    same counts, times and example as ``by_reason``, most dead letters first."""
    return _rolled_up(["signature"])


def dead_letter_views(dead_letters: DataFrame) -> tuple[DataFrame, DataFrame]:
    """(by reason, by signature) of a ``read_dead_letters`` frame. Each action on them reads
    Redis again: cache or checkpoint ``dead_letters.transform(causes())`` to read once."""
    found = dead_letters.transform(causes())
    return found.transform(by_reason()), found.transform(by_signature())
