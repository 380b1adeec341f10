"""Command line of ``jobs/dead_letters.py``: ``--config``, ``--set``, ``--run-id``,
``--log-level`` and ``--dry-run`` (the read changes nothing in Redis either way; with the
opt-in retention on, a dry run counts what it would trim and trims nothing), with the exit
codes of ``jobs/recover.py`` (0 success, 2 invalid config or arguments, 1 anything else); no
``--plan``: any option it does not act on is refused, exit 2.

Errors are one line on stderr (spark-submit merges it into stdout; the installed command
refuses a bad config before spark-submit, on stderr); the last line of stdout is always a
JSON summary.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any, cast

from pyspark.sql import SparkSession

from recovery.cli.common import Outcome, common_parser, exit_code_of, loaded_settings, setup_logging
from recovery.dead_letters.report import DeadLetterSummary
from recovery.dead_letters.run import run_dead_letters
from recovery.errors import EXIT_OK, RedisAuthError, RedisUnavailableError
from recovery.metrics.dead_letter_jobs import push_dead_letters_metrics
from recovery.params import new_run_id
from recovery.report.run_report import check_report_location
from recovery.targets.keys import matched_nothing, warn


def dead_letters_parser() -> argparse.ArgumentParser:
    """The options every job takes (``recovery.cli.common.common_parser``) and --dry-run."""
    parser = common_parser("dead_letters", __doc__)
    parser.add_argument("--dry-run", action="store_true",
                        help="read as usual; count what retention would trim, trim nothing")
    return parser


def dead_letters_main(argv: list[str] | None, session: Callable[[], SparkSession],
                      checks_only: bool = False) -> int:
    """Parse, load, read, report; return the exit code. `session` builds the SparkSession,
    after the config is valid and the report directory writable. The metrics (``[metrics]``)
    are pushed at the end, whatever the outcome. With `checks_only` (the installed command,
    before spark-submit): those checks only; a refusal is reported and pushed as the job's
    would be, a pass prints and pushes nothing."""
    started_s = time.time()
    loaded: dict[str, Any] = {}  # the settings, once known

    def body(summaries: list[Outcome]) -> None:
        args = dead_letters_parser().parse_args(argv)
        setup_logging(args.log_level)
        settings = loaded_settings(args, ["dead_letters.dry_run=true"] if args.dry_run else [])
        if settings is None:  # --print-config
            return
        loaded["settings"] = settings
        check_report_location(settings.report.path)
        if checks_only:
            return
        summary = DeadLetterSummary(args.run_id or new_run_id(),
                                    dry_run=settings.dead_letters.dry_run)
        summary.scheduler_run_id = args.scheduler_run_id
        summaries.append(summary)
        try:
            run_dead_letters(session(), settings, summary)
        except (RedisUnavailableError, RedisAuthError):
            loaded["redis_up"] = 0  # never read: the metrics keep the run group
            raise
        if not summary.totals["dead_letter_streams"] and not summary.skipped:
            warn(summary.warnings, matched_nothing(settings, "stream with a dead-letter stream"))

    def finish(summary: Outcome | None, code: int) -> None:
        if "settings" in loaded and not (checks_only and code == EXIT_OK):
            push_dead_letters_metrics(loaded["settings"],
                                      cast(DeadLetterSummary | None, summary), code, started_s,
                                      loaded.get("redis_up"))

    return exit_code_of(body, "dead-letter read", finish)
