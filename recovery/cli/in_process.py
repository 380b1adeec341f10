"""The operator commands in the command's own Python: ``dry-run``, ``apply``, ``redrive``
and ``dead-letters`` without a cluster master (``recovery.cli.main`` asks
:func:`runs_here`, then calls :func:`run_here` instead of starting spark-submit).

Without a master, spark-submit runs the job on this machine in ``local[*]``: its own JVM
start, then a Python driver that imports the package again. Here the same job runs on the
Python that already checked its options (``recovery.cli.precheck``): ``redrive`` starts no
Spark at all (its work is inside Redis), ``dry-run``, ``apply`` and ``dead-letters`` start a
local session from this process (PySpark launches the JVM with the options of
:func:`_launch_options`, the master spark-submit would have used; ``spark-defaults.conf`` is
read by that launch as by spark-submit). Outputs and exit codes are the job's: the JSON line
last on stdout; the job's stderr (log lines, a dry run's tables, an ``error:`` line) stays
on stderr (spark-submit's PythonRunner would have merged it into stdout).

What decides is where the work would run, not its size: without a master (or with a
``local`` one) spark-submit runs the same Spark on the same cores with the same driver
memory, so no backlog is big enough for it to be faster. spark-submit stays for what this
process cannot honour: the scheduled ``run`` (the process shape Airflow's operators and the
docs show), a master that is not local (``--master``, ``spark.master`` in the properties
files, ``MASTER``; one assigned in ``spark-env.sh``), a driver Python of another environment
(``PYSPARK_PYTHON``, ..., or one assigned in ``spark-env.sh``), and
any other spark-submit option (``--conf``, ``--py-files``,
``--driver-memory``, ...), which only spark-submit applies as written.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Mapping

from recovery.cli.precheck import (
    another_python,
    driver_elsewhere,
    spark_conf,
    spark_env_sets,
    spark_option,
)
from recovery.cli.routes import ROUTES
from recovery.jobs.job_options import BadArguments
from recovery.spark.properties import C1_ONLY, CONSOLE_PROGRESS, DRIVER_JAVA_OPTIONS

RUNS_HERE = ("dry-run", "apply", "redrive", "dead-letters")
# The local session's launch (PySpark runs spark-submit for the JVM with these): the master
# spark-submit defaults to, and the driver JVM compiling with C1 only, as the demo and the
# tests run (docs/PERFORMANCE.md, "JVM and start-up": short local runs end sooner).
LOCAL_MASTER = "local[*]"
DRIVER_JVM = DRIVER_JAVA_OPTIONS
# What spark-submit's PythonRunner gives the driver it starts: here, inherited from another
# process's driver (a PySpark task that started this command), never this run's.
GATEWAY_VARIABLES = ("PYSPARK_GATEWAY_PORT", "PYSPARK_GATEWAY_SECRET")


def runs_here(command: str, spark_args: list[str],
              environ: Mapping[str, str] = os.environ) -> bool:
    """Whether `command` with spark-submit options `spark_args` runs in this process: one of
    :data:`RUNS_HERE`, no spark-submit option but ``--master local...``, the driver's Python
    this one (``PYSPARK_DRIVER_PYTHON``, ``PYSPARK_PYTHON`` or their ``spark.pyspark.*``
    properties naming no other environment's: the handler's modules are its), and the master
    (that option, else ``spark.master`` of the properties files, else ``MASTER``: a
    ``MASTER`` assigned in ``spark-env.sh`` is spark-submit's) local or none.
    ``RECOVERY_SPARK_SUBMIT=1`` in `environ` keeps spark-submit for every command
    (:func:`spark_submit_forced`); ``spark.submit.deployMode=cluster`` in the properties
    files too (the driver is not here)."""
    if command not in RUNS_HERE or spark_submit_forced(environ):
        return False
    if (not _only_a_master(spark_args) or another_python(spark_args)
            or driver_elsewhere(spark_args)):  # spark-defaults' deploy mode too
        return False  # only spark-submit honours them; another Python has its own modules
    master = spark_option(spark_args, "--master")
    if master is None:
        master = spark_conf([], "spark.master")
    if master is None and spark_env_sets(("MASTER",)):
        return False  # spark-env.sh's, which spark-submit sources over this environment
    if master is None:
        master = environ.get("MASTER")
    return master is None or is_local(master)


def spark_submit_forced(environ: Mapping[str, str] = os.environ) -> bool:
    """``RECOVERY_SPARK_SUBMIT``: ``1`` every command through spark-submit, ``0`` or unset
    (or empty) as :func:`runs_here` decides. Any other value raises BadArguments (exit 2): a
    ``true`` read as "not 1" would run here what the user sent to spark-submit."""
    value = environ.get("RECOVERY_SPARK_SUBMIT", "")
    if value not in ("", "0", "1"):
        raise BadArguments(f"RECOVERY_SPARK_SUBMIT={value!r}: set it to 1 (every command "
                           "through spark-submit) or 0 / unset (as the command decides)")
    return value == "1"


def _only_a_master(spark_args: list[str]) -> bool:
    """True when `spark_args` is empty or ``--master M`` / ``--master=M`` alone."""
    return (not spark_args or (len(spark_args) == 2 and spark_args[0] == "--master")
            or (len(spark_args) == 1 and spark_args[0].startswith("--master=")))


def is_local(master: str) -> bool:
    """``local``, ``local[N]``, ``local[*]``, ``local[N,F]``: Spark in the driver's JVM
    (``local-cluster[...]`` starts executor JVMs of its own: not local here)."""
    return master == "local" or (master.startswith("local[") and master.endswith("]"))


def run_here(command: str, job_args: list[str], spark_args: list[str]) -> int:
    """Run `command`'s job with `job_args` (as its job file gets them) here; its exit code.
    SIGTERM ends it as Ctrl-C does (the job's "interrupted" error, exit 1, the metrics push
    and the JSON line), not silently; the handler before is restored after."""
    before = signal.signal(signal.SIGTERM, _interrupt)
    try:
        return _run_job(command, job_args, spark_args)
    finally:
        signal.signal(signal.SIGTERM, before)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def _run_job(command: str, job_args: list[str], spark_args: list[str]) -> int:
    """`command`'s job class, its Spark (if it runs any) launched as spark-submit would."""
    route = ROUTES[command]
    for name in GATEWAY_VARIABLES:  # no spark-submit started this process: not its gateway
        os.environ.pop(name, None)
    if route.runs_spark:
        _launch_options(spark_option(spark_args, "--master"))
    return route.job()().main(job_args)


def _launch_options(master: str | None) -> None:
    """The options PySpark passes to spark-submit when it launches this process's JVM
    (``PYSPARK_SUBMIT_ARGS``): the master, C1 only for the driver JVM and no console
    progress bar where the properties files set neither; the workers run this Python."""
    if master is None:
        master = spark_conf([], "spark.master") or os.environ.get("MASTER") or LOCAL_MASTER
    launch = ["--master", master]
    # PySpark's launch is a shell's (``pyspark-shell``), whose progress bar is on by default:
    # off, as the job's defaults have it under spark-submit, where the files leave it unset.
    for key, value in ((DRIVER_JVM, C1_ONLY), (CONSOLE_PROGRESS, "false")):
        if spark_conf([], key) is None:
            launch += ["--conf", f"{key}={value}"]
    os.environ["PYSPARK_SUBMIT_ARGS"] = " ".join([*launch, "pyspark-shell"])
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
