"""Pure DataFrame logic, asserted as whole DataFrames with explicit schemas."""

from __future__ import annotations

import pytest
from chispa import assert_df_equality
from pyspark.sql import functions as F
from pyspark.sql.types import IntegerType, StructField, StructType

from recovery.schemas import UNIT
from recovery.spark.transforms import units_of_parts


@pytest.mark.slow
def test_units_of_parts_puts_each_part_in_its_own_partition_verbatim(spark):
    names = ["orders{eu}", 'quo"te\\back\nline', "ünï 流", "x"]
    by_part = [[{"stream": names[0], "group": "g", "consumer": "c-0", "part": 0,
                 "cursor": None},
                {"stream": names[1], "group": "g 2", "consumer": "c-0", "part": 0,
                 "cursor": "{x}:recovery-split:r:g 2"}],
               [],
               [{"stream": names[2], "group": "g", "consumer": "c-2", "part": 2,
                 "cursor": None},
                {"stream": names[3], "group": "{g}", "consumer": "c-2", "part": 2,
                 "cursor": None}]]
    units = units_of_parts(spark, by_part)
    placed = units.withColumn("partition", F.spark_partition_id())
    expected = spark.createDataFrame(
        [(*u.values(), u["part"]) for part in by_part for u in part],
        StructType([*UNIT.fields, StructField("partition", IntegerType())]))
    assert_df_equality(placed, expected, ignore_row_order=True, ignore_nullable=True)
