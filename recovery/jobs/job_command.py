"""A job's command: the steps every job takes, in :class:`JobCommand`, and the exit-code
mapping every command shares (:func:`exit_code_of`).

Exit codes (the contract with schedulers): 0 success; 2 invalid config or arguments;
1 anything else (Redis unreachable, login refused, Spark failure, failure threshold).
Errors are one line on stderr (spark-submit merges it into stdout; the installed command
refuses a bad config before spark-submit, on stderr); the last line of stdout is always a
JSON summary.

Each job is one subclass (``recovery.jobs.recover``, ``recovery.jobs.redrive``,
``recovery.jobs.dead_letters``), as rq's worker classes are: the base class parses, loads the
settings, sets up logging, makes the checks once, maps the outcome to the exit code, pushes
the metrics and prints the summary line; a job overrides what differs (its options, its
checks, what it runs, its metrics).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
from collections.abc import Callable
from typing import TYPE_CHECKING, ClassVar, Generic, Protocol, TypeVar

from recovery.errors import (
    EXIT_FAILURE,
    EXIT_OK,
    RecoveryError,
    RedisAuthError,
    RedisUnavailableError,
)
from recovery.jobs.job_options import common_parser, loaded_settings, setup_logging

if TYPE_CHECKING:  # pyspark is imported by the jobs that start Spark, when they start it
    from pyspark.sql import SparkSession

    from recovery.settings.model import Settings


class Outcome(Protocol):
    """What a job's summary must have for the exit mapping and the JSON line."""

    status: str
    error: str | None
    exit_code: int
    scheduler_run_id: str | None

    def json_line(self) -> str: ...


S = TypeVar("S", bound=Outcome)
SessionMaker = Callable[["Settings"], "SparkSession"]


class JobCommand(Generic[S]):
    """One job's command line: :meth:`main` runs it, :meth:`check` makes only the checks
    that need neither Redis nor Spark (the installed command, before spark-submit: a refusal
    is reported and pushed as the run's would be, a pass prints and pushes nothing).

    A job's docstring is its ``--help`` description; it sets `prog` (argparse's program
    name, as ``--version`` prints it), `what` (how errors name it), `app_name` (its
    SparkSession's), `dry_run_help` and, when ``--dry-run`` is a setting, `dry_run_setting`;
    it overrides :meth:`add_options`, :meth:`check_locally`, :meth:`check_server`,
    :meth:`execute` and :meth:`push_metrics` as it needs. A new job is a new subclass, and
    its command a new entry of ``recovery.cli.routes.ROUTES``."""

    prog: ClassVar[str]
    what: ClassVar[str]
    app_name: ClassVar[str]
    dry_run_help: ClassVar[str]
    dry_run_setting: ClassVar[str | None] = None  # "redrive.dry_run": --dry-run sets it

    def __init__(self, session: SessionMaker | None = None) -> None:
        """`session` builds the SparkSession once the checks passed (default: the
        submitter's, ``recovery.spark.session.submitted_session``; the demo and the tests
        pass a local one)."""
        self._session = session
        self._start(checks_only=False)

    def _start(self, checks_only: bool) -> None:
        """A new run's state (an instance may run more than once)."""
        self.checks_only = checks_only
        self.started_s = time.time()  # Unix time, for the metrics
        self.settings: Settings | None = None  # once loaded
        self.args = argparse.Namespace()
        self.summary: S | None = None  # as soon as the job has one
        self.redis_up: int | None = None  # 1 the checks read the server, 0 it was not reached

    def main(self, argv: list[str] | None = None) -> int:
        """Parse `argv` (default ``sys.argv[1:]``), load, check, run, report, push the
        metrics (``[metrics]``, whatever the outcome); return the exit code."""
        return self._outcome(argv, checks_only=False)

    def check(self, argv: list[str] | None = None) -> int:
        """The checks of :meth:`main` before any Redis call or Spark start, only; the exit
        code (0: the job may start)."""
        return self._outcome(argv, checks_only=True)

    def _outcome(self, argv: list[str] | None, checks_only: bool) -> int:
        self._start(checks_only)
        return exit_code_of(lambda: self._steps(argv), self.what, lambda: self.summary,
                            self._finish)

    def _steps(self, argv: list[str] | None) -> None:
        args = self.parser().parse_args(argv)
        setup_logging(args.log_level)
        dry_run = [f"{self.dry_run_setting}=true"] if self.dry_run_setting and args.dry_run else []
        settings = loaded_settings(args, dry_run)
        if settings is None:  # --print-config
            return
        self.settings, self.args = settings, args
        self.check_locally(settings)
        if self.checks_only:
            return
        try:
            self.check_server(settings)
            self.execute(settings)
        except (RedisUnavailableError, RedisAuthError):
            self.redis_up = 0  # the metrics say so (redis_up), beside the exit code
            raise

    def _finish(self, summary: Outcome | None, code: int) -> None:
        if self.settings is not None and not (self.checks_only and code == EXIT_OK):
            self.push_metrics(self.settings, code)

    def parser(self) -> argparse.ArgumentParser:
        """The options every job takes (``recovery.jobs.job_options.common_parser``),
        ``--dry-run`` and the job's own (:meth:`add_options`); any other is refused, exit 2."""
        parser = common_parser(self.prog, type(self).__doc__)
        parser.add_argument("--dry-run", action="store_true", help=self.dry_run_help)
        self.add_options(parser)
        return parser

    def add_options(self, parser: argparse.ArgumentParser) -> None:
        """The job's own options beyond :meth:`parser`'s."""

    def check_locally(self, settings: Settings) -> None:
        """The job's checks that need neither Redis nor Spark (made by :meth:`check` too)."""

    def check_server(self, settings: Settings) -> None:
        """The job's checks of Redis before Spark starts (not made by :meth:`check`)."""

    def execute(self, settings: Settings) -> None:
        """The job's work; keeps its summary (:meth:`keep`) as soon as it has one."""
        raise NotImplementedError

    def push_metrics(self, settings: Settings, code: int) -> None:
        """Push the job's metrics (``[metrics]``); must not raise."""

    def spark(self, settings: Settings) -> SparkSession:
        """The SparkSession: the one `session` builds, else the submitter's."""
        if self._session is not None:
            return self._session(settings)
        from recovery.spark.session import submitted_session

        return submitted_session(self.app_name)

    def keep(self, summary: S) -> S:
        """`summary` is this run's (its JSON line ends stdout), with the scheduler's run id."""
        summary.scheduler_run_id = self.args.scheduler_run_id
        self.summary = summary
        return summary


def exit_code_of(body: Callable[[], None], what: str,
                 summary: Callable[[], Outcome | None] = lambda: None,
                 finish: Callable[[Outcome | None, int], None] | None = None) -> int:
    """Run a command's `body`; `summary` gives its summary once it has one (None before).
    A RecoveryError becomes its one-line error and exit code, Ctrl-C exit 1; the summary's
    JSON line (or the error's) is always stdout's last line. `finish` (the metrics push), if
    given, is called with the summary (None: none yet) and the exit code just before that
    line; it must not raise. Returns the code."""
    error: str | None = None  # the error of a run without a summary, for its JSON line
    try:
        body()
        code = EXIT_OK
    except RecoveryError as exc:
        code, error = report_error(exc, summary(), exc.exit_code)
    except KeyboardInterrupt:
        code, error = report_error(RecoveryError(f"interrupted; re-run the {what} to finish"),
                                   summary(), EXIT_FAILURE)
    except Exception as exc:  # not one of ours (Spark cannot start, a bug): still exit 1,
        # one error line, the metrics' attempt and the JSON line; the traceback before them
        traceback.print_exc(file=sys.stderr)
        code, error = report_error(
            RecoveryError(f"the {what} failed unexpectedly: {type(exc).__name__}: "
                          f"{first_line(exc)}"), summary(), EXIT_FAILURE)
    kept = summary()
    if finish is not None:  # before the JSON line: its log lines must not come after it
        finish(kept, code)
    if kept is not None:
        kept.exit_code = code
        print(kept.json_line(), flush=True)
    elif error is not None:
        print(json.dumps({"status": "error", "exit_code": code, "error": error}), flush=True)
    return code


def report_error(exc: Exception, summary: Outcome | None, code: int
                 ) -> tuple[int, str | None]:
    """Print the one-line error; mark the summary failed. Returns `code` and, for a run
    without a summary, the error for the JSON error line, which the caller prints last
    (after the metrics push, whose log lines spark-submit merges into stdout)."""
    print(f"error: {exc}", file=sys.stderr, flush=True)
    if summary is None:
        return code, str(exc)
    summary.status, summary.error = "failed", str(exc)
    return code, None


def first_line(exc: BaseException) -> str:
    """The first non-empty line of `exc`'s message (500 characters at most)."""
    return next((line.strip() for line in str(exc).splitlines() if line.strip()), "")[:500]
