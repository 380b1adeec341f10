"""Command line of ``jobs/redrive.py``: ``--config``, ``--set``, ``--run-id``,
``--log-level`` and ``--dry-run``, with the exit codes of ``jobs/recover.py`` (0 success, 2
invalid config or arguments, 1 anything else). It has no ``--plan`` (a redrive's filters are
its plan): any option it does not act on is refused, exit 2, before anything is touched.

Errors are one line on stderr (spark-submit merges it into stdout; the installed command
refuses a bad config before spark-submit, on stderr); the last line of stdout is always a
JSON summary.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any, cast

from recovery.cli.common import Outcome, common_parser, exit_code_of, loaded_settings, setup_logging
from recovery.errors import EXIT_OK, RedisAuthError, RedisUnavailableError
from recovery.metrics.dead_letter_jobs import push_redrive_metrics
from recovery.params import new_run_id
from recovery.redrive.run import RedriveSummary, id_range, run_redrive
from recovery.settings.model import Settings
from recovery.targets.keys import matched_nothing, warn

FILTERS = ("groups", "reasons", "from_id", "to_id", "since", "until")


def redrive_parser() -> argparse.ArgumentParser:
    """The options every job takes (``recovery.cli.common.common_parser``) and --dry-run."""
    parser = common_parser("redrive", __doc__)
    parser.add_argument("--dry-run", action="store_true",
                        help="count what would be redriven; change nothing")
    return parser


def redrive_main(argv: list[str] | None, on_start: Callable[[], None] = lambda: None,
                 checks_only: bool = False) -> int:
    """Parse, load, redrive, report; return the exit code. `on_start` runs after the config
    is valid and before any Redis call (the entry point starts Spark there). The metrics
    (``[metrics]``) are pushed at the end, whatever the outcome. With `checks_only` (the
    installed command, before spark-submit): the checks before `on_start` only; a refusal is
    reported and pushed as the job's would be, a pass prints and pushes nothing."""
    started_s = time.time()
    loaded: dict[str, Any] = {}  # the settings, once known

    def body(summaries: list[Outcome]) -> None:
        args = redrive_parser().parse_args(argv)
        setup_logging(args.log_level)
        settings = loaded_settings(args, ["redrive.dry_run=true"] if args.dry_run else [])
        if settings is None:  # --print-config
            return
        loaded["settings"] = settings
        id_range(settings.redrive)  # an empty range is a config error: exit 2 before anything
        if checks_only:
            return
        on_start()
        summary = RedriveSummary(args.run_id or new_run_id())
        summary.scheduler_run_id = args.scheduler_run_id
        summaries.append(summary)
        try:
            run_redrive(settings, summary)
        except (RedisUnavailableError, RedisAuthError):
            loaded["redis_up"] = 0  # never read: the metrics keep the run group
            raise
        for message in redrive_warnings(settings, summary):
            warn(summary.warnings, message)

    def finish(summary: Outcome | None, code: int) -> None:
        if "settings" in loaded and not (checks_only and code == EXIT_OK):
            push_redrive_metrics(loaded["settings"], cast(RedriveSummary | None, summary),
                                 code, started_s, loaded.get("redis_up"))

    return exit_code_of(body, "redrive", finish)


def redrive_warnings(settings: Settings, summary: RedriveSummary) -> list[str]:
    """Why a finished redrive matched nothing, where a typo is the likely cause: no selected
    stream has a dead-letter stream; a named stream's dead-letter stream is missing or
    empty; the ``[redrive]`` filters matched none of the dead letters examined."""
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
