"""The trend across runs: the group health snapshots every recovery run writes
(``<report.path>/health/run_id=<run id>/``, HEALTH in ``recovery.schemas``) read as one
DataFrame, with each run's time taken from its run id (``%Y%m%dT%H%M%SZ-xxxxxx``)."""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StringType, StructField, StructType

from recovery.dead_letters.views import Transform
from recovery.report.worker_files import local_directory
from recovery.schemas import HEALTH
from recovery.settings.model import Settings

RUN_ID = StructField("run_id", StringType(), False)
HEALTH_OF_RUNS = StructType([*HEALTH.fields, RUN_ID])  # health/ read whole: run_id from paths
RUN_TIME_FORMAT = "yyyyMMdd'T'HHmmssX"  # the first 16 characters of a run id; X reads the Z
TREND_COLUMNS = ["run_id", "run_time", "stream", "group", "length", "lag", "pending",
                 "oldest_idle_ms", "dead_letter_length"]


def trend_rows() -> Transform:
    """HEALTH_OF_RUNS rows -> the trend columns (TREND_COLUMNS), oldest run first.
    ``run_time`` is a timestamp (UTC), null for a run id of another form (``--run-id``);
    ``dead_letter_length`` is null in snapshots of runs before it was collected."""

    def shape(df: DataFrame) -> DataFrame:
        run_time = F.try_to_timestamp(F.substring("run_id", 1, 16), F.lit(RUN_TIME_FORMAT))
        return (df.withColumn("run_time", run_time).select(*TREND_COLUMNS)
                .orderBy("run_time", "run_id", "stream", "group"))

    return shape


def health_trend(spark: SparkSession, settings: Settings) -> DataFrame:
    """Every run's group health under ``report.path``: pending, oldest idle ms, stream and
    dead-letter stream lengths per stream and group over time (TREND_COLUMNS). Empty when
    no run wrote health yet."""
    path = f"{settings.report.path.rstrip('/')}/health"
    local = local_directory(path)
    if local is not None and not any(local.glob("run_id=*/*.parquet")):
        return spark.createDataFrame([], HEALTH_OF_RUNS).transform(trend_rows())
    return spark.read.schema(HEALTH_OF_RUNS).parquet(path).transform(trend_rows())
