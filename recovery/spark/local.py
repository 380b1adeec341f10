"""Local sessions that PySpark starts itself (demo, notebook, tests): how their JVM runs.

A local run is short, and its JVM spends a large share of its CPU compiling Spark's own code
with the optimising JIT compiler (C2). With C1 only (``-XX:TieredStopAtLevel=1``) that
compile work is gone and the code runs somewhat slower: short runs, which the demo and the
tests are made of, end sooner (docs/PERFORMANCE.md). spark-submit starts its JVM before the
job's Python runs, so there the option goes on the command line.

Import after ``recovery.spark.pyspark_path.prefer_installed_pyspark()`` in entry points.
"""

from __future__ import annotations

from pyspark.sql import SparkSession

from recovery.spark.properties import C1_ONLY, CONSOLE_PROGRESS, DRIVER_JAVA_OPTIONS
from recovery.spark.pyspark_path import with_installed_pyspark

LOCAL_JVM_OPTIONS = C1_ONLY
LOCAL_CONF = {
    DRIVER_JAVA_OPTIONS: LOCAL_JVM_OPTIONS,  # only read when the JVM starts
    "spark.ui.enabled": "false",
    CONSOLE_PROGRESS: "false",  # no progress bar amid the job's log lines
    "spark.sql.session.timeZone": "UTC",
}


def local_session(master: str, app_name: str, **conf: str) -> SparkSession:
    """A session on `master` (``local[N]`` or ``local[N,F]``) with ``LOCAL_CONF`` plus
    `conf` (Spark keys with dots are passed as ``**{"spark.x": "v"}``). The JVM options
    apply only if this starts the JVM, i.e. it is the process's first session."""
    builder = with_installed_pyspark(SparkSession.builder).master(master).appName(app_name)
    for key, value in {**LOCAL_CONF, **conf}.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()
