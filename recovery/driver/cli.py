"""Command-line plumbing shared by the spark-submit entry points.

Exit codes (the contract with schedulers): 0 success; 2 invalid config or arguments;
1 anything else (Redis unreachable, login refused, Spark failure, failure threshold).
Errors are one line on stderr; the last line of stdout is always a JSON summary.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from pyspark import SparkConf
from pyspark.sql import SparkSession

from recovery.driver.handler_choice import check_handler
from recovery.driver.job import run
from recovery.driver.local_spark import C1_ONLY
from recovery.driver.plan import local_plan_refusal
from recovery.driver.pyspark_path import with_installed_pyspark
from recovery.errors import EXIT_BAD_INPUT, EXIT_FAILURE, EXIT_OK, RecoveryError
from recovery.redis_io.redis_conn import connect
from recovery.report.run_report import check_report_location
from recovery.settings.model import Settings, load_settings, redis_params
from recovery.targets.keys import check_server

log = logging.getLogger("recovery")
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
CONSOLE_PROGRESS = "spark.ui.showConsoleProgress"
EXECUTOR_JAVA_OPTIONS = "spark.executor.extraJavaOptions"


class _ArgumentParser(argparse.ArgumentParser):
    """argparse that raises instead of exiting, so bad arguments get our one-line error."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise _BadArguments(f"{self.prog}: {message} (see --help)")


class _BadArguments(RecoveryError):
    exit_code = EXIT_BAD_INPUT


def common_parser(prog: str, description: str | None) -> argparse.ArgumentParser:
    """The options every entry point takes: --config, --set, --run-id, --log-level. Each job
    adds only the options it acts on; any other is refused (exit 2, before anything)."""
    parser = _ArgumentParser(prog=prog, description=description)
    parser.add_argument("--config", type=Path, help="TOML config file (see conf/recovery.toml)")
    parser.add_argument("--set", dest="overrides", action="append", default=[],
                        metavar="SECTION.FIELD=VALUE", help="override one setting (repeatable)")
    parser.add_argument("--run-id", help="run id (default: UTC time plus random suffix)")
    parser.add_argument("--log-level", default="INFO", type=log_level, metavar="LEVEL",
                        help=f"log level of the job's own logs: {', '.join(LOG_LEVELS)}")
    return parser


def log_level(text: str) -> str:
    """A ``--log-level`` value as a level name; any other is a bad argument (exit 2)."""
    if text.upper() not in LOG_LEVELS:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a log level: use one of {', '.join(LOG_LEVELS)}")
    return text.upper()


def recover_parser() -> argparse.ArgumentParser:
    """common_parser's options, --dry-run and --plan."""
    parser = common_parser("recover", __doc__)
    parser.add_argument("--dry-run", action="store_true",
                        help="plan only: read XPENDING and XRANGE, claim and change nothing")
    parser.add_argument("--plan", metavar="DIR",
                        help="apply a dry run's plan exactly: its report directory "
                             "(<report.path>/entries/run_id=<id>)")
    return parser


def submitted_session(app_name: str) -> SparkSession:
    """An entry point's session: the submitter decides the master; the job names itself and
    starts its Python workers from the installed PySpark (``recovery.driver.pyspark_path``).
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


def setup_logging(level: str) -> None:
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("recovery").setLevel(level.upper())


def run_recovery(argv: list[str] | None,
                 session: Callable[[Settings], SparkSession]) -> int:
    """Parse, load, run, report; return the exit code. `session` builds the SparkSession."""

    def body(summaries: list[Outcome]) -> None:
        args = recover_parser().parse_args(argv)
        setup_logging(args.log_level)
        settings = load_settings(args.config, args.overrides)
        if args.plan is not None and args.dry_run:
            raise _BadArguments("--plan and --dry-run exclude each other: a plan is applied "
                                "by a real run; drop one of them")
        preflight(settings, args.plan, args.dry_run)
        summary = run(session(settings), settings, args.run_id, dry_run=args.dry_run,
                      plan=args.plan)
        summaries.append(summary)
        summary.check_failure_threshold(settings.handler.max_failed_ratio)

    return exit_code_of(body, "job")


def exit_code_of(body: Callable[[list[Outcome]], None], what: str) -> int:
    """Run an entry point's `body`, which adds its summary to the list it is given as soon as
    it has one. A RecoveryError becomes its one-line error and exit code, Ctrl-C exit 1; the
    summary's JSON line (or the error's) is always stdout's last line. Returns the code."""
    summaries: list[Outcome] = []
    try:
        body(summaries)
        code = EXIT_OK
    except RecoveryError as exc:
        code = report_error(exc, summaries[0] if summaries else None, exc.exit_code)
    except KeyboardInterrupt:
        code = report_error(RecoveryError(f"interrupted; re-run the {what} to finish"),
                            summaries[0] if summaries else None, EXIT_FAILURE)
    if summaries:
        print(summaries[0].json_line(), flush=True)
    return code


def preflight(settings: Settings, plan: str | None = None, dry_run: bool = False) -> None:
    """Fail fast, before Spark starts (10 s or more): a real run in handler mode must name a
    handler, the handler named must import, and Redis must answer (reachable, login accepted,
    version 6.2 or newer); a `plan` in a local directory must be one this run may apply. The
    run checks them again (and warns a dry run without a handler)."""
    if settings.handler.path is not None or not dry_run:
        check_handler(settings)
    check_report_location(settings.report.path)
    params = redis_params(settings)
    client = connect(params)
    try:
        check_server(client, params)
        if plan is not None:
            local_plan_refusal(plan, settings, client, params)
    finally:
        client.close()


class Outcome(Protocol):
    """What an entry point's summary must have for ``report_error`` and the JSON line."""

    status: str
    error: str | None

    def json_line(self) -> str: ...


def report_error(exc: Exception, summary: Outcome | None, code: int) -> int:
    """Print the one-line error; mark the summary failed, or, without one, print the JSON
    error line (stdout's last line). Returns `code`."""
    print(f"error: {exc}", file=sys.stderr, flush=True)
    if summary is None:
        print(json.dumps({"status": "error", "exit_code": code, "error": str(exc)}), flush=True)
    else:
        summary.status, summary.error = "failed", str(exc)
    return code
