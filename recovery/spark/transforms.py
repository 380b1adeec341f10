"""Pure DataFrame logic of a run: spread the units over partitions. No I/O here. (The route
of each claimed entry is decided on the executors: ``recovery.executor.handover.routed``;
the summary is counted there too: ``recovery.executor.tally``.)"""

from __future__ import annotations

import json
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, StructType

from recovery.schemas import UNIT


def units_of_parts(spark: SparkSession, by_part: list[list[dict[str, Any]]],
                   schema: StructType = UNIT) -> DataFrame:
    """`schema` rows (UNIT unless given), part p's units in partition p (one partition per
    part, the empty ones included), whatever their keys hash to.

    The parts travel as one array literal of JSON strings, and the JVM unpacks row p of
    ``spark.range`` into part p's units: no Python worker has to start just to spread a few
    rows.
    """
    n = len(by_part)
    parts = F.lit([json.dumps(units) for units in by_part])
    units = F.from_json(F.element_at(parts, F.col("id").cast("int") + 1), ArrayType(schema))
    return spark.range(0, n, 1, n).select(F.inline(units))
