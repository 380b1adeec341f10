"""Move dead letters back to their source streams: the spark-submit entry point and its
command class.

    spark-submit jobs/redrive.py --config conf/recovery.toml [--dry-run] \
        [--set redrive.reasons=handler-failed-at-limit] [--set redrive.limit=1000]

Sources are ``streams.keys`` / ``streams.match``, filters and rate the ``[redrive]`` section.
Exit codes: 0 success, 2 invalid config or arguments, 1 anything else. The last line of
stdout is a JSON summary. The work runs on the driver, inside Redis (see recovery/redrive/run.py).
"""

from __future__ import annotations

import _thread
import os
import sys
import threading
import time
from typing import TYPE_CHECKING

from recovery.jobs.job_command import JobCommand
from recovery.params import new_run_id
from recovery.redrive.report import RedriveSummary

if TYPE_CHECKING:
    from recovery.settings.model import Settings

# The redrive (redis-py, the settings model) is imported by the step that uses it: a command
# line refused before it loads neither (as in recovery.jobs.recover).

FILTERS = ("groups", "reasons", "from_id", "to_id", "since", "until")
PARENT_POLL_S = 0.5  # how often the driver looks whether spark-submit's JVM still runs


class RedriveJob(JobCommand[RedriveSummary]):
    """Command line of ``jobs/redrive.py``: ``--config``, ``--set``, ``--run-id``,
    ``--log-level`` and ``--dry-run``, with the exit codes of ``jobs/recover.py`` (0 success, 2
    invalid config or arguments, 1 anything else). It has no ``--plan`` (a redrive's filters are
    its plan): any option it does not act on is refused, exit 2, before anything is touched.

    Errors are one line on stderr (spark-submit merges it into stdout; the installed command
    refuses a bad config before spark-submit, on stderr); the last line of stdout is always a
    JSON summary.
    """

    prog = "redrive"
    what = "redrive"
    app_name = "redis-stream-redrive"
    dry_run_help = "count what would be redriven; change nothing"
    dry_run_setting = "redrive.dry_run"

    def check_locally(self, settings: Settings) -> None:
        from recovery.redrive.run import id_range

        id_range(settings.redrive)  # an empty range is a config error: exit 2 before anything

    def execute(self, settings: Settings) -> None:
        """The redrive, inside Redis: no Spark of its own (:func:`register_with_cluster`)."""
        from recovery.redrive.run import run_redrive
        from recovery.targets.keys import warn

        register_with_cluster(self.app_name)
        summary = self.keep(RedriveSummary(self.args.run_id or new_run_id()))
        run_redrive(settings, summary)
        for message in redrive_warnings(settings, summary):
            warn(summary.warnings, message)

    def push_metrics(self, settings: Settings, code: int) -> None:
        from recovery.metrics.dead_letter_jobs import push_redrive_metrics

        push_redrive_metrics(settings, self.summary, code, self.started_s, self.redis_up)


def redrive_warnings(settings: Settings, summary: RedriveSummary) -> list[str]:
    """Why a finished redrive matched nothing, where a typo is the likely cause: no selected
    stream has a dead-letter stream; a named stream's dead-letter stream is missing or
    empty; the ``[redrive]`` filters matched none of the dead letters examined."""
    from recovery.targets.keys import matched_nothing

    if summary.totals["matched"] or summary.status != "ok":
        return []
    if not summary.units:
        return [matched_nothing(settings, "stream with a dead-letter stream")]
    messages = [f"{u.stream}: no dead-letter stream {u.dead_letter_stream} (or it is "
                "empty): check streams.keys and dead_letter.suffix"
                for u in summary.units if not u.examined and not u.left_in_dead_letter]
    examined = summary.totals["examined"]
    chosen = [f"redrive.{name}" for name in FILTERS
              if getattr(settings.redrive, name) not in (None, [], "-", "+")]
    if examined and chosen:
        messages.append(f"the filters ({', '.join(chosen)}) matched none of the {examined} "
                        "dead letters examined: check their values")
    return messages


def register_with_cluster(app_name: str) -> None:
    """Under spark-submit, start the SparkSession, so the cluster manager sees a running
    application (YARN cluster mode fails a driver that never creates one), and end the
    redrive as Ctrl-C does once that JVM is gone (:func:`stop_with_parent`). Run with plain
    ``python`` (cron, tests, the installed command in its own process), no JVM is started."""
    if os.environ.get("PYSPARK_GATEWAY_PORT"):
        from pyspark.sql import SparkSession

        SparkSession.builder.appName(app_name).getOrCreate()
        stop_with_parent()


def stop_with_parent() -> None:
    """A SIGTERM to spark-submit (a scheduler's timeout, ``kill``) ends its JVM, and Spark's
    PythonRunner leaves this driver running, orphaned, moving letters no one waits for. A
    daemon thread looks every PARENT_POLL_S seconds whether the parent changed and then
    interrupts the main thread: the redrive stops between two atomic moves and reports
    "interrupted", exit 1."""
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(PARENT_POLL_S)
        _thread.interrupt_main()

    threading.Thread(target=watch, daemon=True, name="parent-watch").start()


def main(argv: list[str] | None = None) -> int:
    """The redrive under spark-submit, or with plain ``python``; its exit code."""
    return RedriveJob().main(argv)


if __name__ == "__main__":
    sys.exit(main())
