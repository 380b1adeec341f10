"""The warm-up query a run starts while it reads Redis (recovery.driver.warm_up): real Spark
queries on the tests' session; no Redis involved (the warm-up touches none)."""

from __future__ import annotations

import pytest
from pyspark.sql import DataFrame, SparkSession

from recovery.driver.warm_up import JOB_GROUP, WarmUp, warming_up


@pytest.mark.slow
def test_the_warm_up_collects_two_dummy_units_in_the_units_shape(spark):
    """The query it runs is the units' own (UNIT rows spread by part), of two dummy units."""
    warm = WarmUp(spark)
    warm.wait()
    assert warm.error is None
    assert sorted(warm.rows, key=lambda r: r["part"]) == [
        {"stream": "", "group": "", "consumer": "", "part": 0, "cursor": None},
        {"stream": "", "group": "", "consumer": "", "part": 1, "cursor": None}]


def test_a_warm_up_that_fails_is_kept_not_raised(spark):
    """A failing warm-up query ends quietly: the run's own Spark work reports its own."""

    def failing(session: SparkSession) -> DataFrame:
        return session.range(1).selectExpr("raise_error('the warm-up query fails') AS x")

    warm = WarmUp(spark, failing)
    warm.wait()
    assert warm.rows == []
    assert "the warm-up query fails" in str(warm.error)


def test_once_per_application_and_nothing_left_running_on_the_way_out(spark):
    """The first run of a Spark application warms up, later ones do not; leaving the block
    cancels a warm-up still running and waits for its thread, so nothing of it runs on."""
    warmed: set[str] = set()
    with warming_up(spark, warmed) as first:
        assert isinstance(first, WarmUp)
    assert not first._thread.is_alive()
    tracker = spark.sparkContext.statusTracker()
    assert all(tracker.getJobInfo(job).status != "RUNNING"
               for job in tracker.getJobIdsForGroup(JOB_GROUP))
    assert warmed == {spark.sparkContext.applicationId}
    with warming_up(spark, warmed) as second:
        assert second is None
