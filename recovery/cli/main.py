"""``redis-stream-recovery`` (and ``python -m recovery``): the installed tool's command. It
submits the job files this package carries to Spark, so no checkout is needed:

    redis-stream-recovery run          [JOB OPTIONS] [-- SPARK-SUBMIT OPTIONS]
    redis-stream-recovery dry-run      [JOB OPTIONS] [-- SPARK-SUBMIT OPTIONS]
    redis-stream-recovery apply PLAN   [JOB OPTIONS] [-- SPARK-SUBMIT OPTIONS]
    redis-stream-recovery redrive      [JOB OPTIONS] [-- SPARK-SUBMIT OPTIONS]
    redis-stream-recovery dead-letters [JOB OPTIONS] [-- SPARK-SUBMIT OPTIONS]
    redis-stream-recovery config       [--config FILE] [--set section.field=value ...]
    redis-stream-recovery console      [--config FILE] [--host H] [--port P] ...
    redis-stream-recovery init         [DIR] [--with alerts,dashboard,dag|all] [--force]
    redis-stream-recovery --version

JOB OPTIONS are the job's own (``--config``, ``--set``, ``--run-id``, ``--log-level``, ...);
SPARK-SUBMIT OPTIONS go to spark-submit as they are (``--master yarn --conf k=v``). The
spark-submit run is ``$SPARK_HOME/bin/spark-submit`` when ``SPARK_HOME`` is set, else the one
on ``PATH``; ``PYSPARK_PYTHON`` defaults to this Python. The process becomes spark-submit
(exec), so its exit code and output are the job's. Without a cluster master, ``dry-run``, ``apply``,
``redrive`` and ``dead-letters`` run in this Python instead, with the same outputs and exit
codes (:mod:`recovery.cli.in_process` says when). Before that, the job's options are checked
here, in Python (:mod:`recovery.cli.precheck`): a bad config, a handler that does not import
or a plan that cannot be applied is refused in well under a second, on stderr, with the job's
exit code, before any JVM starts. A handler module in the working directory
(``./myhandlers.py`` for ``handler.path = "myhandlers:handle"``) is added to spark-submit's
``--py-files`` (:mod:`recovery.cli.local_modules`). ``config`` prints the effective
settings (secrets masked) without Spark or Redis. ``console`` serves the dead-letter console
(:mod:`recovery.cli.console`) in this process: no Spark. ``init`` writes the commented config
``DIR/conf/recovery.toml`` and, with ``--with``, the alert rules, the Grafana dashboard and
the Airflow DAG file (:mod:`recovery.cli.init_command`). Which job each command runs:
:mod:`recovery.cli.routes`.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from recovery import __version__
from recovery.cli.in_process import run_here, runs_here, spark_submit_forced
from recovery.cli.init_command import init_main
from recovery.cli.local_modules import with_shipped_modules
from recovery.cli.precheck import precheck
from recovery.cli.routes import JOBS_DIR, ROUTES
from recovery.errors import EXIT_BAD_INPUT
from recovery.jobs.job_command import exit_code_of
from recovery.jobs.job_options import ArgumentParser, BadArguments, OnlyOnce, loaded_settings

# The job options spark-submit does not have (it stops at one: exit 1, no JSON line).
JOB_ONLY_OPTIONS = ("--config", "--set", "--run-id", "--scheduler-run-id", "--log-level",
                    "--print-config",
                    "--dry-run", "--plan")
HERE_ONLY = ("config", "console", "init")  # the commands that start no spark-submit
USAGE = (f"usage: redis-stream-recovery {{{','.join([*ROUTES, *HERE_ONLY])}}} [JOB OPTIONS] "
         "[-- SPARK-SUBMIT OPTIONS] | --version | --help")


def main(argv: list[str] | None = None) -> int:
    """Run the command `argv` names (default: ``sys.argv[1:]``). Returns an exit code only
    for what ends here (``config``, ``--version``, ``--help``, a bad command line): a job
    replaces this process with spark-submit."""
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] in ("-h", "--help"):
        print(f"{USAGE}\n\n{__doc__}")
        return 0 if args else EXIT_BAD_INPUT
    if args[0] == "--version":
        print(f"redis-stream-recovery {__version__}")
        return 0
    if args[0] == "config":
        return exit_code_of(lambda: _print_config(args[1:]), "config")
    if args[0] == "console":
        try:  # the optional extra, imported only when asked for
            from recovery.cli.console import console_main
        except ImportError as exc:
            print(f"error: the console needs its extra ({exc.name} is missing): pip install "
                  "'redis-stream-recovery[console]'", file=sys.stderr)
            return EXIT_BAD_INPUT
        return console_main(args[1:])
    if args[0] == "init":
        return init_main(args[1:])
    built: list[list[str]] = []  # a refusal here is told as the job's: error and JSON lines
    refused_here = exit_code_of(lambda: built.append(submit_command(args)), "command")
    if not built:
        return refused_here
    job_args, given_spark_args = _job_and_spark_args(built[0])
    shipped: list[list[str]] = []
    refused_here = exit_code_of(lambda: shipped.append(
        with_shipped_modules(args[0], job_args, given_spark_args)), "command")
    if not shipped:
        return refused_here
    spark_args = shipped[0]
    command = [built[0][0], *spark_args, *built[0][1 + len(given_spark_args):]]
    refused = precheck(args[0], job_args, spark_args)
    if refused is not None:
        return refused
    if runs_here(args[0], spark_args):  # no cluster: the job in this Python (in_process)
        return run_here(args[0], job_args, spark_args)
    env = {**os.environ, "PYSPARK_PYTHON": os.environ.get("PYSPARK_PYTHON", sys.executable)}
    os.execve(command[0], command, env)
    return 1  # not reached: execve replaces the process or raises


def submit_command(args: list[str]) -> list[str]:
    """The spark-submit command line for `args` (``<command> [job options] [-- spark
    options]``). Raises BadArguments, naming the fix, for an unknown command, a job option
    after ``--``, ``apply`` without a plan, a ``RECOVERY_SPARK_SUBMIT`` other than 0 or 1,
    or no spark-submit to run."""
    name, rest = args[0], args[1:]
    if name not in ROUTES:
        raise BadArguments(f"unknown command {name!r}: use one of "
                           f"{', '.join([*ROUTES, *HERE_ONLY])} (see --help)")
    spark_submit_forced()  # a RECOVERY_SPARK_SUBMIT it cannot read is refused here
    route = ROUTES[name]
    added = route.added
    job_args, spark_args = _split_at_dashes(rest)
    misplaced = [a for a in spark_args if a.partition("=")[0] in JOB_ONLY_OPTIONS]
    if misplaced:
        raise BadArguments(f"{misplaced[0].partition('=')[0]} is a job option, after --: "
                           "put job options before --, spark-submit's after it")
    if name == "apply":
        if not job_args or job_args[0].startswith("-"):
            raise BadArguments("apply needs the dry run's report directory: "
                               "redis-stream-recovery apply <report.path>/entries/run_id=<id>")
        added, job_args = (*added, job_args[0]), job_args[1:]
    return [spark_submit(), *spark_args, str(route.file), *added, *job_args]


def spark_submit() -> str:
    """The spark-submit to run: ``$SPARK_HOME/bin/spark-submit``, else the one on PATH, else
    the one beside this Python (pip's pyspark installs it there)."""
    home = os.environ.get("SPARK_HOME")
    candidates = [str(Path(home) / "bin" / "spark-submit")] if home else []
    candidates += [shutil.which("spark-submit") or "",
                   str(Path(sys.executable).parent / "spark-submit")]
    for candidate in candidates:
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    raise BadArguments("no spark-submit found: install pyspark here, put spark-submit on PATH "
                       "or set SPARK_HOME")


def _job_and_spark_args(command: list[str]) -> tuple[list[str], list[str]]:
    """(the job file's arguments, spark-submit's options) of a submit_command line."""
    job_file = next(i for i, arg in enumerate(command)
                    if arg.startswith(str(JOBS_DIR)) and arg.endswith(".py"))
    return command[job_file + 1:], command[1:job_file]


def _split_at_dashes(args: list[str]) -> tuple[list[str], list[str]]:
    """(job options, spark-submit options): the latter after the first ``--``."""
    if "--" not in args:
        return args, []
    cut = args.index("--")
    return args[:cut], args[cut + 1:]


def _print_config(args: list[str]) -> None:
    """``config``: the effective settings as one JSON line, secrets masked."""
    parser = ArgumentParser(prog="redis-stream-recovery config",
                            description="Print the effective settings (secrets masked); no "
                                        "Spark, no Redis. Takes --config and --set.")
    parser.add_argument("--config", type=Path, action=OnlyOnce,
                        help="TOML config file (`redis-stream-recovery init` writes a "
                             "commented one: conf/recovery.toml)")
    parser.add_argument("--set", dest="overrides", action="append", default=[],
                        metavar="SECTION.FIELD=VALUE", help="override one setting (repeatable)")
    parser.add_argument("--print-config", action="store_true",
                        help="what this command does anyway (as the jobs' option)")
    parsed = parser.parse_args(args)  # any other option (--run-id, ...) is refused: exit 2
    parsed.print_config = True
    loaded_settings(parsed)
