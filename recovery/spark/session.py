"""The Spark session of a spark-submit entry point: the submitter decides the master, the
job adds its defaults where the submitter set none."""

from __future__ import annotations

from pyspark import SparkConf
from pyspark.sql import SparkSession

from recovery.spark.local import C1_ONLY
from recovery.spark.pyspark_path import with_installed_pyspark

CONSOLE_PROGRESS = "spark.ui.showConsoleProgress"
EXECUTOR_JAVA_OPTIONS = "spark.executor.extraJavaOptions"


def submitted_session(app_name: str) -> SparkSession:
    """An entry point's session: the submitter decides the master; the job names itself and
    starts its Python workers from the installed PySpark (``recovery.spark.pyspark_path``).
    Settings the submitter did not make (``--conf``, spark-defaults) get the job's defaults
    (:func:`job_defaults`)."""
    builder = SparkSession.builder.appName(app_name)
    for key, value in job_defaults(SparkConf()).items():
        builder = builder.config(key, value)
    return with_installed_pyspark(builder).getOrCreate()


def job_defaults(submitted: SparkConf) -> dict[str, str]:
    """The settings an entry point adds where `submitted` has none:

    - Spark's console progress bar off: it would interleave with the job's log lines;
    - the executors' JVMs compile with C1 only (``-XX:TieredStopAtLevel=1``): each run
      starts them cold, and the optimising compiler's CPU competes with the Python workers
      for the executors' cores, while the JVM only carries small Arrow batches (or writes
      the report rows). On ``local-cluster[2,1,1024]`` at 10,000 x 100 it took 8-12 s off a
      run and did not slow the pass, Spark's report writer included (docs/PERFORMANCE.md).
      A local master has no executor JVM; there the driver's option is the submitter's
      (README, "Running it").
    """
    defaults = {CONSOLE_PROGRESS: "false", EXECUTOR_JAVA_OPTIONS: C1_ONLY}
    return {key: value for key, value in defaults.items() if not submitted.contains(key)}
