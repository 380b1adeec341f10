"""Pure DataFrame logic of a run: spread the units over partitions, summarise. No I/O here.
(The route of each claimed entry is decided on the executors: ``recovery.routed``.)"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType

from recovery.schemas import ACTIONS, UNIT

Transform = Callable[[DataFrame], DataFrame]


def summarise(actions: tuple[str, ...] = ACTIONS) -> Transform:
    """Report rows -> one row per (stream, group) with a count per action and a total
    (unordered: a few rows, sorted where they are shown)."""

    def _summarise(report: DataFrame) -> DataFrame:
        # One aggregation, one shuffle (a pivot aggregates twice: a Spark job more per run).
        counts = [F.count_if(F.col("action") == a).alias(a) for a in actions]
        total = sum((F.col(a) for a in actions), F.lit(0))
        return (report.groupBy("stream", "group").agg(*counts)
                .withColumn("total", total.cast("long")))

    return _summarise


def units_of_parts(spark: SparkSession, by_part: list[list[dict[str, Any]]]) -> DataFrame:
    """UNIT rows, part p's units in partition p (one partition per part, the empty ones
    included), whatever their keys hash to.

    The parts travel as one array literal of JSON strings, and the JVM unpacks row p of
    ``spark.range`` into part p's units: no Python worker has to start just to spread a few
    rows (measured: ~1 s less per run).
    """
    n = len(by_part)
    parts = F.lit([json.dumps(units) for units in by_part])
    units = F.from_json(F.element_at(parts, F.col("id").cast("int") + 1), ArrayType(UNIT))
    return spark.range(0, n, 1, n).select(F.inline(units))
