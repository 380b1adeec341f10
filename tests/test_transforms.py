"""Pure DataFrame logic, asserted as whole DataFrames with explicit schemas."""

from __future__ import annotations

from chispa import assert_df_equality
from pyspark.sql import functions as F
from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType

from recovery.schemas import UNIT
from recovery.transforms import summarise, units_of_parts


def test_summarise_counts_every_action_per_unit(spark):
    schema = StructType([StructField(n, StringType()) for n in ("stream", "group", "action")])
    report = spark.createDataFrame([
        ("a", "g", "reprocessed"), ("a", "g", "reprocessed"), ("a", "g", "failed"),
        ("b", "g", "deleted"),
    ], schema)
    counts = StructType(
        [StructField("stream", StringType()), StructField("group", StringType())]
        + [StructField(a, LongType()) for a in
           ("reprocessed", "dead_lettered", "failed", "deleted", "skipped", "total")])
    expected = spark.createDataFrame([("a", "g", 2, 0, 1, 0, 0, 3), ("b", "g", 0, 0, 0, 1, 0, 1)],
                                     counts)
    assert_df_equality(report.transform(summarise()), expected, ignore_row_order=True,
                       ignore_nullable=True)


def test_units_of_parts_puts_each_part_in_its_own_partition_verbatim(spark):
    names = ["orders{eu}", 'quo"te\\back\nline', "ünï 流", "x"]
    by_part = [[{"stream": names[0], "group": "g", "consumer": "c-0", "part": 0},
                {"stream": names[1], "group": "g 2", "consumer": "c-0", "part": 0}],
               [],
               [{"stream": names[2], "group": "g", "consumer": "c-2", "part": 2},
                {"stream": names[3], "group": "{g}", "consumer": "c-2", "part": 2}]]
    units = units_of_parts(spark, by_part)
    placed = units.withColumn("partition", F.spark_partition_id())
    expected = spark.createDataFrame(
        [(*u.values(), u["part"]) for part in by_part for u in part],
        StructType([*UNIT.fields, StructField("partition", IntegerType())]))
    assert_df_equality(placed, expected, ignore_row_order=True, ignore_nullable=True)
