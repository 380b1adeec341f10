"""The Spark session of a spark-submit entry point: the submitter decides the master, the
job adds its defaults where the submitter set none."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from pyspark import SparkConf, SparkContext
from pyspark.sql import SparkSession

from recovery.spark.properties import (
    C1_ONLY,
    CONSOLE_PROGRESS,
    DRIVER_JAVA_OPTIONS,
    EXECUTOR_JAVA_OPTIONS,
    LOG_LEVEL,
)
from recovery.spark.pyspark_path import with_installed_pyspark

LOG4J2_FILES = ("log4j2.properties", "log4j2.xml", "log4j2.yaml", "log4j2.yml", "log4j2.json")


def submitted_session(app_name: str) -> SparkSession:
    """An entry point's session: the submitter decides the master; the job names itself and
    starts its Python workers from the installed PySpark (``recovery.spark.pyspark_path``).
    Settings the submitter did not make (``--conf``, spark-defaults) get the job's defaults
    (:func:`job_defaults`)."""
    # Attach to spark-submit's JVM first: only then does SparkConf() hold what the submitter
    # set (--conf, spark-defaults.conf); before, it is empty and every default would
    # override the submitter's own setting.
    SparkContext._ensure_initialized()
    builder = SparkSession.builder.appName(app_name)
    for key, value in job_defaults(SparkConf()).items():
        builder = builder.config(key, value)
    return with_installed_pyspark(builder).getOrCreate()


def job_defaults(submitted: SparkConf, environ: Mapping[str, str] = os.environ
                 ) -> dict[str, str]:
    """The settings an entry point adds where `submitted` has none (`environ`: the
    environment, where Spark's conf directory is named):

    - Spark's console progress bar off: it would interleave with the job's log lines;
    - the executors' JVMs compile with C1 only (``-XX:TieredStopAtLevel=1``): each run
      starts them cold, and the optimising compiler's CPU competes with the Python workers
      for the executors' cores, while the JVM only carries small Arrow batches (or writes
      the report rows). On ``local-cluster[2,1,1024]`` at 10,000 x 100 it took 8-12 s off a
      run and did not slow the pass, Spark's report writer included (docs/PERFORMANCE.md).
      A local master has no executor JVM; there the driver's option is the submitter's
      (docs/PERFORMANCE.md, "JVM and start-up");
    - Spark's own log at WARN (``spark.log.level``) unless the submitter configured Spark's
      logging (:func:`own_log_config`): its INFO lines would bury the job's.
    """
    defaults = {CONSOLE_PROGRESS: "false", EXECUTOR_JAVA_OPTIONS: C1_ONLY}
    if not own_log_config(submitted, environ):
        defaults[LOG_LEVEL] = "WARN"
    return {key: value for key, value in defaults.items() if not submitted.contains(key)}


def own_log_config(submitted: SparkConf, environ: Mapping[str, str] = os.environ) -> bool:
    """Whether the submitter configured Spark's logging: a log4j2 file in Spark's conf
    directory (``SPARK_CONF_DIR``, else ``$SPARK_HOME/conf``), or a log4j configuration file
    named in the driver's Java options (``spark.driver.extraJavaOptions``)."""
    conf_dir = environ.get("SPARK_CONF_DIR") or (
        str(Path(environ["SPARK_HOME"]) / "conf") if environ.get("SPARK_HOME") else None)
    if conf_dir and any((Path(conf_dir) / name).is_file() for name in LOG4J2_FILES):
        return True
    return "log4j" in (submitted.get(DRIVER_JAVA_OPTIONS) or "")


def spark_context(spark: SparkSession) -> SparkContext | None:
    """`spark`'s SparkContext; None under Spark Connect (no SparkContext on this side)."""
    try:
        return spark.sparkContext
    except AttributeError:  # PySparkAttributeError: JVM_ATTRIBUTE_NOT_SUPPORTED
        return None
