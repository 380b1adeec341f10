"""Pure DataFrame logic, asserted as whole DataFrames with explicit schemas."""

from __future__ import annotations

from chispa import assert_df_equality
from pyspark.sql.types import LongType, StringType, StructField, StructType

from recovery.schemas import CLAIMED, PENDING, ROUTED
from recovery.transforms import join_pending, route, summarise

F1 = [{"name": b"k\xff", "value": b""}]


def test_join_keeps_claimed_pending_and_orphans_once(spark):
    claimed = spark.createDataFrame([
        ("s", "g", "c0", "1-0", False, "old", 5000, F1),   # claimed and pending
        ("s", "g", "c0", "2-0", True, "old", 7000, None),  # deleted upstream
        ("s", "g", "c0", "3-0", False, "old", 6000, F1),   # acked by someone since
    ], CLAIMED)
    pending = spark.createDataFrame([
        ("s", "g", "c0", "1-0", 3),
        ("s", "g", "c0", "4-0", 2),  # claimed by an earlier task attempt: taken back
    ], PENDING)
    routed = claimed.transform(join_pending(pending)).transform(route(max_deliveries=2))
    expected = spark.createDataFrame([
        ("s", "g", "c0", "1-0", False, "old", 5000, F1, 3, "dead_letter"),
        ("s", "g", "c0", "2-0", True, "old", 7000, None, None, "deleted"),
        ("s", "g", "c0", "3-0", False, "old", 6000, F1, None, "gone"),
        ("s", "g", "c0", "4-0", False, None, None, None, 2, "handle"),
    ], ROUTED)
    assert_df_equality(routed, expected, ignore_row_order=True, ignore_nullable=True)


def test_join_plan_never_broadcasts_the_claimed_side(spark):
    claimed = spark.createDataFrame([], CLAIMED)
    pending = spark.createDataFrame([], PENDING)
    plan = claimed.transform(join_pending(pending))._jdf.queryExecution().executedPlan()
    text = plan.toString()
    assert "Broadcast" not in text
    assert "SortMergeJoin" in text  # spills instead of failing on a huge PEL


def test_join_hands_each_unit_over_in_numeric_id_order(spark):
    """Lexical order would put 1-10 before 1-9 and 10-0 before 9-0; the lease reads ID
    ranges, so each (stream, group) must come out in stream-ID order."""
    ids = ["9-0", "1-10", "10-0", "1-9", "1-2", "18446744073709551615-0", "1-100"]
    claimed = spark.createDataFrame(
        [("s", "g", "c0", i, False, None, None, F1) for i in ids], CLAIMED)
    pending = spark.createDataFrame([("s", "g", "c0", i, 2) for i in ids], PENDING)
    joined = claimed.transform(join_pending(pending.repartition(2, "stream", "group")))
    assert [r["id"] for r in joined.collect()] == [
        "1-2", "1-9", "1-10", "1-100", "9-0", "10-0", "18446744073709551615-0"]


def test_route_limit_is_exclusive(spark):
    rows = [("s", "g", "c", f"{n}-0", False, None, None, None, n) for n in (4, 5, 6)]
    schema = StructType(ROUTED.fields[:-1])
    routed = spark.createDataFrame(rows, schema).transform(route(max_deliveries=5))
    expected = spark.createDataFrame(
        [(*r, a) for r, a in zip(rows, ["handle", "handle", "dead_letter"], strict=True)],
        ROUTED)
    assert_df_equality(routed, expected, ignore_row_order=True, ignore_nullable=True)


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
