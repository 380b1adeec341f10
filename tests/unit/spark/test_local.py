"""The local sessions that PySpark starts itself run their JVM as ``recovery.spark.local``
says (C1 only: a short local run's JVM otherwise spends much of its CPU in the C2 compiler),
and keep Spark's console progress bar out of the log; spark-submit runs get the entry
points' defaults (``recovery.spark.session.job_defaults``) where the submitter set nothing."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from pyspark import SparkConf
from pyspark.sql import SparkSession

from recovery.spark.local import LOCAL_JVM_OPTIONS
from recovery.spark.session import job_defaults


def jvm_command_line(spark: SparkSession) -> list[str]:
    """The arguments of the session's JVM process, from /proc (the JVM's own view)."""
    pid = spark.sparkContext._gateway.proc.pid  # type: ignore[union-attr]
    return Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")


def test_the_test_session_jvm_runs_with_the_local_options(spark):
    args = jvm_command_line(spark)
    assert args[0].endswith("java")
    assert all(option in args for option in LOCAL_JVM_OPTIONS.split())


MARK = "--- a session stopped ---"
# One process, two sessions one after the other (one JVM start): the first with the local
# defaults only, the second with the settings given as arguments.
BAR_SCRIPT = f"""
import sys, time
from pyspark.sql import functions as F
from recovery.spark.local import local_session
for conf in ({{}}, dict(c.split("=", 1) for c in sys.argv[1:])):
    spark = local_session("local[1]", "bar-check", **conf)
    slow = F.udf(lambda x: time.sleep(2.5) or x, "long")
    spark.range(1).select(slow("id")).collect()
    spark.stop()
    print({MARK!r}, file=sys.stderr, flush=True)
"""


def spark_stderr(*conf: str) -> str:
    """stderr of a fresh process that runs a 2.5 s stage in a local session with the local
    defaults, then the same in a new session with `conf` (``key=value``): each followed by
    MARK."""
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
    return subprocess.run([sys.executable, "-c", BAR_SCRIPT, *conf], capture_output=True,
                          text=True, timeout=120, env=env, check=True).stderr


@pytest.mark.slow
def test_local_sessions_print_no_console_progress_bar_unless_asked():
    """The demo's, notebook's and tests' sessions keep Spark's progress bar out of the log;
    asked for, it shows (so the check would see it)."""
    plain, asked, _ = spark_stderr("spark.ui.showConsoleProgress=true").split(MARK)
    assert "[Stage " not in plain
    assert "[Stage " in asked


def test_submitted_runs_get_the_job_defaults_only_where_the_submitter_set_nothing():
    """Executors' JVMs with C1 only, no console progress bar, Spark's log at WARN; a
    submitter's own setting of each stays as it is (even an empty one)."""
    assert job_defaults(SparkConf(loadDefaults=False), {}) == {
        "spark.ui.showConsoleProgress": "false",
        "spark.executor.extraJavaOptions": "-XX:TieredStopAtLevel=1",
        "spark.log.level": "WARN"}
    theirs = (SparkConf(loadDefaults=False).set("spark.executor.extraJavaOptions", "")
              .set("spark.ui.showConsoleProgress", "true").set("spark.log.level", "INFO"))
    assert job_defaults(theirs, {}) == {}
    only_bar = SparkConf(loadDefaults=False).set("spark.ui.showConsoleProgress", "true")
    assert job_defaults(only_bar, {}) == {
        "spark.executor.extraJavaOptions": "-XX:TieredStopAtLevel=1", "spark.log.level": "WARN"}


@pytest.mark.parametrize("where", ["SPARK_CONF_DIR", "SPARK_HOME"])
def test_spark_stays_at_its_own_log_level_where_the_submitter_configured_logging(
        tmp_path: Path, where: str) -> None:
    """A log4j2 file in Spark's conf directory, or one named in the driver's Java options:
    the job sets no ``spark.log.level`` (which would override the submitter's own)."""
    conf_dir = tmp_path / "conf" if where == "SPARK_HOME" else tmp_path
    conf_dir.mkdir(exist_ok=True)
    environ = {where: str(tmp_path)}
    assert "spark.log.level" in job_defaults(SparkConf(loadDefaults=False), environ)
    (conf_dir / "log4j2.properties").write_text("rootLogger.level = info\n")
    assert "spark.log.level" not in job_defaults(SparkConf(loadDefaults=False), environ)
    named = SparkConf(loadDefaults=False).set(
        "spark.driver.extraJavaOptions", "-Dlog4j2.configurationFile=/etc/spark/log4j2.xml")
    assert "spark.log.level" not in job_defaults(named, {})
