"""The Spark properties and JVM options the job sets, by name: plain strings, no pyspark
import, so the installed command can prepare a local session's launch
(``recovery.cli.in_process``) before it knows the command will start Spark at all."""

from __future__ import annotations

C1_ONLY = "-XX:TieredStopAtLevel=1"  # the JVM compiles with C1 only, never with C2
CONSOLE_PROGRESS = "spark.ui.showConsoleProgress"
EXECUTOR_JAVA_OPTIONS = "spark.executor.extraJavaOptions"
DRIVER_JAVA_OPTIONS = "spark.driver.extraJavaOptions"
LOG_LEVEL = "spark.log.level"  # Spark's own log level, set as the SparkContext starts
