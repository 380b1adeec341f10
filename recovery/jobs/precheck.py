"""The installed command's checks before it starts spark-submit (``recovery.jobs.submit``).

Under spark-submit a config typo costs a JVM start (14-17 s here) and its ``error:`` line
lands on stdout: Spark's PythonRunner merges the job's stderr into its stdout. So the
command first does, in this Python, what the job would do before Spark starts: parse the
job's options, load the settings (file, ``RECOVERY_*``, ``--set``) and, for ``run``,
``dry-run`` and ``apply``, the job's checks that need neither Redis nor Spark
(``recovery.cli.recover.local_preflight``: the handler and its exception classes import,
the report path is writable, a local plan's terms allow the run). A refusal is the job's
own: one ``error:`` line on stderr, the JSON error line on stdout, its exit code (2), and
its metrics push (``[metrics]``: the attempt, as the job pushes a refused run). What passes
is checked again by the job. Redis is not contacted here: a run that cannot reach it
is the job's to report (exit 1), metrics push included, as before.

Skipped where this process is not where the driver runs (``--deploy-mode cluster``: its
files, modules and network are the cluster's), and for ``--help``, ``--version`` and
``--print-config`` (the job answers those itself). A handler shipped with ``--py-files``
is imported from those files, as the driver would.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

from recovery.cli.common import exit_code_of, loaded_settings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from recovery.settings.model import Settings

ANSWERED_BY_THE_JOB = ("-h", "--help", "--version", "--print-config")


def precheck(command: str, job_args: list[str], spark_args: list[str]) -> int | None:
    """Check `command`'s job options (as the job file gets them) before spark-submit:
    None when the job may start, else the exit code of the refusal just printed (and, for
    ``run``, ``dry-run`` and ``apply``, pushed to ``[metrics]`` as the job would)."""
    if _driver_elsewhere(spark_args) or any(a in ANSWERED_BY_THE_JOB for a in job_args):
        return None
    _add_py_files(spark_args)
    if command in ("run", "dry-run", "apply"):
        from recovery.cli.recover import run_recovery

        code = run_recovery(job_args, _no_session, checks_only=True)
    else:
        code = exit_code_of(lambda _: _load(command, job_args), command)
    return code or None


def _no_session(settings: Settings) -> SparkSession:
    raise RuntimeError("the checks before spark-submit start no Spark")


def _load(command: str, job_args: list[str]) -> None:
    """``redrive``, ``dead-letters``: their options and settings (they check the rest
    themselves, Redis first)."""
    if command == "redrive":
        from recovery.cli.redrive import redrive_parser

        loaded_settings(redrive_parser().parse_args(job_args))
    else:
        from recovery.cli.dead_letters import dead_letters_parser

        loaded_settings(dead_letters_parser().parse_args(job_args))


def _driver_elsewhere(spark_args: list[str]) -> bool:
    """True for ``--deploy-mode cluster`` (either spelling), where the driver is not here."""
    for i, arg in enumerate(spark_args):
        if arg == "--deploy-mode" and spark_args[i + 1:i + 2] == ["cluster"]:
            return True
        if arg == "--deploy-mode=cluster":
            return True
    return False


def _add_py_files(spark_args: list[str]) -> None:
    """Put the local ``--py-files`` on this process's path, as spark-submit puts them on the
    driver's: a handler shipped that way imports here too."""
    for i, arg in enumerate(spark_args):
        value = (spark_args[i + 1] if arg == "--py-files" and i + 1 < len(spark_args)
                 else arg.partition("=")[2] if arg.startswith("--py-files=") else "")
        for item in filter(None, value.split(",")):
            path = Path(item.removeprefix("file://"))
            entry = str(path.parent if path.suffix == ".py" else path)
            if path.exists() and entry not in sys.path:
                sys.path.append(entry)
