"""Recover stuck messages of Redis Streams consumer groups: claim the idle pending entries,
dead-letter those delivered too often, re-process the rest, and report what was done.

Exit codes: 0 success; 2 invalid config or arguments; 1 anything else (Redis unreachable,
login refused, Spark failure, failure threshold). Errors are one line on stderr (spark-submit
merges it into stdout; the installed command refuses a bad config before spark-submit, on
stderr); the last line of stdout is always a JSON summary.
"""

from __future__ import annotations

import argparse
import logging
import time
from collections.abc import Callable
from typing import Any, cast

from pyspark.sql import SparkSession

from recovery.cli.common import (
    BadArguments,
    OnlyOnce,
    Outcome,
    common_parser,
    exit_code_of,
    loaded_settings,
    setup_logging,
)
from recovery.driver.handler_choice import check_handler
from recovery.driver.job import run
from recovery.driver.ordered import check_order
from recovery.driver.plan import local_plan_refusal
from recovery.errors import EXIT_OK, RedisAuthError, RedisUnavailableError
from recovery.metrics.recovery_run import push_recovery_metrics
from recovery.redis_io.redis_conn import RedisConn
from recovery.report.run_report import check_report_location
from recovery.report.summary import RunSummary
from recovery.settings.model import Settings, redis_params
from recovery.targets.keys import check_features, check_server

log = logging.getLogger("recovery")


def recover_parser() -> argparse.ArgumentParser:
    """common_parser's options, --dry-run and --plan."""
    parser = common_parser("recover", __doc__)
    parser.add_argument("--dry-run", action="store_true",
                        help="plan only: read XPENDING and XRANGE, claim and change nothing")
    parser.add_argument("--plan", metavar="DIR", action=OnlyOnce,
                        help="apply a dry run's plan exactly: its report directory "
                             "(<report.path>/entries/run_id=<id>)")
    return parser


def run_recovery(argv: list[str] | None, session: Callable[[Settings], SparkSession],
                 checks_only: bool = False) -> int:
    """Parse, load, run, report, push the metrics (``[metrics]``, whatever the outcome);
    return the exit code. `session` builds the SparkSession. With `checks_only` (the
    installed command, before spark-submit): parse, load and :func:`local_preflight` only;
    a refusal is reported and pushed as the run's would be, a pass prints and pushes
    nothing (the run that follows does)."""
    started_s = time.time()
    loaded: dict[str, Any] = {}  # the settings and the kind of run, once known

    def body(summaries: list[Outcome]) -> None:
        args = recover_parser().parse_args(argv)
        setup_logging(args.log_level)
        settings = loaded_settings(args)
        if settings is None:  # --print-config
            return
        loaded.update(settings=settings, dry_run=args.dry_run, plan=args.plan is not None)
        if args.plan is not None and args.dry_run:
            raise BadArguments("--plan and --dry-run exclude each other: a plan is applied "
                                "by a real run; drop one of them")
        check_order(settings, args.dry_run, args.plan)
        if checks_only:
            local_preflight(settings, args.plan, args.dry_run)
            return
        try:
            preflight(settings, args.plan, args.dry_run, warn=True)
            loaded["redis_up"] = 1  # preflight read the server
            summary = run(session(settings), settings, args.run_id, dry_run=args.dry_run,
                          plan=args.plan, checked=True,  # the checks are made once: here
                          scheduler_run_id=args.scheduler_run_id)
        except (RedisUnavailableError, RedisAuthError):
            loaded["redis_up"] = 0  # the metrics say so (redis_up), beside the exit code
            raise
        summaries.append(summary)
        summary.check_not_empty(settings.streams.fail_when_empty)
        summary.check_failure_threshold(settings.handler.max_failed_ratio)

    def finish(summary: Outcome | None, code: int) -> None:
        if "settings" in loaded and not (checks_only and code == EXIT_OK):
            push_recovery_metrics(loaded["settings"], cast(RunSummary | None, summary), code,
                                  started_s, loaded["dry_run"], loaded["plan"],
                                  loaded.get("redis_up"))

    return exit_code_of(body, "job", finish)


def preflight(settings: Settings, plan: str | None = None, dry_run: bool = False,
              warn: bool = False) -> None:
    """Fail fast, before Spark starts (10 s or more): :func:`local_preflight`, then Redis
    must answer (reachable, login accepted, version 6.2 or newer) and a `plan` in a local
    directory must have been made on this server. The run that follows is told not to
    check them again (``recovery.driver.job.run``'s `checked`). `warn`: a dry run in handler
    mode without a handler logs its WARNING (the run no longer does)."""
    local_preflight(settings, plan, dry_run, warn)
    with RedisConn.open(redis_params(settings)) as conn:
        check_server(conn)
        check_features(conn, settings)
        if plan is not None:
            local_plan_refusal(plan, settings, conn)


def local_preflight(settings: Settings, plan: str | None = None, dry_run: bool = False,
                    warn: bool = False) -> None:
    """The checks that need neither Redis nor Spark (the installed command makes them before
    spark-submit, :mod:`recovery.jobs.precheck`): a real run in handler mode must name a
    handler, the handler named must import, the local report directory must be writable, and
    a `plan` in a local directory must be a manifest whose terms allow this run. `warn`: see
    :func:`preflight` (the check before spark-submit leaves the WARNING to the job)."""
    if settings.handler.path is not None or not dry_run or warn:
        check_handler(settings, dry_run)  # a dry run without one: a WARNING, if `warn`
    check_report_location(settings.report.path)
    if plan is not None:
        local_plan_refusal(plan, settings, None)
