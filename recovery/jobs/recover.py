"""Recover stuck Redis Streams messages: the spark-submit entry point and its command class.

    spark-submit jobs/recover.py --config conf/recovery.toml [--set claim.min_idle_ms=60000]
    spark-submit jobs/recover.py --config conf/recovery.toml --dry-run
    spark-submit jobs/recover.py --config conf/recovery.toml \
        --plan reports/entries/run_id=<the dry run's id>     # exactly that dry run's plan

Exit codes: 0 success, 2 invalid config or arguments, 1 anything else. The last line of
stdout is a JSON summary of the run.
"""

from __future__ import annotations

import sys

from recovery.spark.pyspark_path import prefer_installed_pyspark

prefer_installed_pyspark()  # before the first pyspark import

import argparse  # noqa: E402
from typing import TYPE_CHECKING  # noqa: E402

from recovery.jobs.job_command import JobCommand  # noqa: E402
from recovery.jobs.job_options import BadArguments, OnlyOnce  # noqa: E402
from recovery.report.summary import RunSummary  # noqa: E402

if TYPE_CHECKING:
    from recovery.settings.model import Settings

# The driver (pyspark, pyarrow, redis-py) is imported by the step that uses it: the installed
# command checks a command line with this class before spark-submit, and one refused there
# (a bad option, a bad config) or --help loads no Spark (tests/unit/cli/test_light_start.py).


class RecoverJob(JobCommand[RunSummary]):
    """Recover stuck messages of Redis Streams consumer groups: claim the idle pending
    entries, dead-letter those delivered too often, re-process the rest, and report what
    was done.

    Exit codes: 0 success; 2 invalid config or arguments; 1 anything else (Redis
    unreachable, login refused, Spark failure, failure threshold). Errors are one line on
    stderr (spark-submit merges it into stdout; the installed command refuses a bad config
    before spark-submit, on stderr); the last line of stdout is always a JSON summary.
    """

    prog = "recover"
    what = "job"
    app_name = "redis-stream-recovery"
    dry_run_help = "plan only: read XPENDING and XRANGE, claim and change nothing"

    def add_options(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--plan", metavar="DIR", action=OnlyOnce,
                            help="apply a dry run's plan exactly: its report directory "
                                 "(<report.path>/entries/run_id=<id>)")

    def check_locally(self, settings: Settings) -> None:
        """--plan with --dry-run, the order settings, then :func:`local_preflight` (a dry
        run's missing handler warns in the run, not in :meth:`check`)."""
        from recovery.driver.ordered import check_order

        if self.args.plan is not None and self.args.dry_run:
            raise BadArguments("--plan and --dry-run exclude each other: a plan is applied "
                               "by a real run; drop one of them")
        check_order(settings, self.args.dry_run, self.args.plan)
        local_preflight(settings, self.args.plan, self.args.dry_run, warn=not self.checks_only)

    def check_server(self, settings: Settings) -> None:
        """:func:`server_preflight`; the run is then told not to check again."""
        server_preflight(settings, self.args.plan)
        self.redis_up = 1  # the checks read the server

    def execute(self, settings: Settings) -> None:
        from recovery.driver.job import run

        args = self.args
        summary = self.keep(run(self.spark(settings), settings, args.run_id,
                                dry_run=args.dry_run, plan=args.plan,
                                checked=True,  # the checks are made once: here
                                scheduler_run_id=args.scheduler_run_id))
        summary.check_not_empty(settings.streams.fail_when_empty)
        summary.check_failure_threshold(settings.handler.max_failed_ratio)

    def push_metrics(self, settings: Settings, code: int) -> None:
        from recovery.metrics.recovery_run import push_recovery_metrics

        push_recovery_metrics(settings, self.summary, code, self.started_s, self.args.dry_run,
                              self.args.plan is not None, self.redis_up)


def preflight(settings: Settings, plan: str | None = None, dry_run: bool = False,
              warn: bool = False) -> None:
    """Fail fast, before Spark starts (10 s or more): :func:`local_preflight`, then
    :func:`server_preflight`. The run that follows is told not to check them again
    (``recovery.driver.job.run``'s `checked`). `warn`: a dry run in handler mode without a
    handler logs its WARNING (the run no longer does)."""
    local_preflight(settings, plan, dry_run, warn)
    server_preflight(settings, plan)


def server_preflight(settings: Settings, plan: str | None = None) -> None:
    """Redis must answer (reachable, login accepted, version 6.2 or newer, the features the
    settings need) and a `plan` in a local directory must have been made on this server."""
    from recovery.driver.plan import local_plan_refusal
    from recovery.redis_io.redis_conn import RedisConn
    from recovery.settings.model import redis_params
    from recovery.targets.keys import check_features, check_server

    with RedisConn.open(redis_params(settings)) as conn:
        check_server(conn)
        check_features(conn, settings)
        if plan is not None:
            local_plan_refusal(plan, settings, conn)


def local_preflight(settings: Settings, plan: str | None = None, dry_run: bool = False,
                    warn: bool = False) -> None:
    """The checks that need neither Redis nor Spark (the installed command makes them before
    spark-submit, :mod:`recovery.cli.precheck`): a real run in handler mode must name a
    handler, the handler named must import, the local report directory must be writable, and
    a `plan` in a local directory must be a manifest whose terms allow this run. `warn`: see
    :func:`preflight` (the check before spark-submit leaves the WARNING to the job)."""
    from recovery.driver.handler_choice import check_handler
    from recovery.driver.plan import local_plan_refusal
    from recovery.report.run_report import check_report_location

    if settings.handler.path is not None or not dry_run or warn:
        check_handler(settings, dry_run)  # a dry run without one: a WARNING, if `warn`
    check_report_location(settings.report.path)
    if plan is not None:
        local_plan_refusal(plan, settings, None)


def main(argv: list[str] | None = None) -> int:
    """The job under spark-submit (the submitter decides the master); its exit code."""
    return RecoverJob().main(argv)


if __name__ == "__main__":
    sys.exit(main())
