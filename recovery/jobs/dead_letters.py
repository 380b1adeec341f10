"""Read the dead-letter streams as data: grouped by cause and by error signature, with
warnings on their length and age. Read-only unless the opt-in retention
(``dead_letters.max_age_s`` / ``max_length``) is on: then it trims the letters past a limit.

    spark-submit jobs/dead_letters.py --config conf/recovery.toml \
        [--set dead_letters.warn_length=10000] [--set streams.match=orders:*]

The dead-letter streams are those of the streams ``streams.keys`` / ``streams.match`` select.
Views go to ``<report.path>/dead_letters/run_id=<run id>/`` (``by_reason/``,
``by_signature/``). Exit codes: 0 success, 2 invalid config or arguments, 1 anything else.
The last line of stdout is a JSON summary.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from recovery.spark.pyspark_path import prefer_installed_pyspark

prefer_installed_pyspark()  # before the first pyspark import

from recovery.dead_letters.report import DeadLetterSummary  # noqa: E402
from recovery.jobs.job_command import JobCommand  # noqa: E402
from recovery.params import new_run_id  # noqa: E402

if TYPE_CHECKING:
    from recovery.settings.model import Settings

# The read (pyspark, pyarrow, redis-py) is imported by the step that uses it: a command line
# refused before Spark loads none of them (as in recovery.jobs.recover).


class DeadLettersJob(JobCommand[DeadLetterSummary]):
    """Command line of ``jobs/dead_letters.py``: ``--config``, ``--set``, ``--run-id``,
    ``--log-level`` and ``--dry-run`` (the read changes nothing in Redis either way; with the
    opt-in retention on, a dry run counts what it would trim and trims nothing), with the exit
    codes of ``jobs/recover.py`` (0 success, 2 invalid config or arguments, 1 anything else); no
    ``--plan``: any option it does not act on is refused, exit 2.

    Errors are one line on stderr (spark-submit merges it into stdout; the installed command
    refuses a bad config before spark-submit, on stderr); the last line of stdout is always a
    JSON summary.
    """

    prog = "dead_letters"
    what = "dead-letter read"
    app_name = "redis-stream-dead-letters"
    dry_run_help = "read as usual; count what retention would trim, trim nothing"
    dry_run_setting = "dead_letters.dry_run"

    def check_locally(self, settings: Settings) -> None:
        from recovery.report.run_report import check_report_location

        check_report_location(settings.report.path)

    def execute(self, settings: Settings) -> None:
        from recovery.dead_letters.run import run_dead_letters
        from recovery.targets.keys import matched_nothing, warn

        summary = self.keep(DeadLetterSummary(self.args.run_id or new_run_id(),
                                              dry_run=settings.dead_letters.dry_run))
        run_dead_letters(self.spark(settings), settings, summary)
        if not summary.totals["dead_letter_streams"] and not summary.skipped:
            warn(summary.warnings, matched_nothing(settings, "stream with a dead-letter stream"))

    def push_metrics(self, settings: Settings, code: int) -> None:
        from recovery.metrics.dead_letter_jobs import push_dead_letters_metrics

        push_dead_letters_metrics(settings, self.summary, code, self.started_s, self.redis_up)


def main(argv: list[str] | None = None) -> int:
    """The read under spark-submit (the submitter decides the master); its exit code."""
    return DeadLettersJob().main(argv)


if __name__ == "__main__":
    sys.exit(main())
