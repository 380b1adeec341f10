"""Command line of ``jobs/redrive.py``: the same options and exit codes as ``jobs/recover.py``
(0 success, 2 invalid config or arguments, 1 anything else), plus ``--dry-run``.

Errors are one line on stderr; the last line of stdout is always a JSON summary.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

from recovery.config import load_settings
from recovery.driver.cli import Outcome, exit_code_of, recover_parser, setup_logging
from recovery.driver.job import new_run_id
from recovery.redrive.run import RedriveSummary, id_range, run_redrive


def redrive_parser() -> argparse.ArgumentParser:
    """recover's parser (--config, --set, --run-id, --log-level, --dry-run), its dry run
    described for a redrive."""
    parser = recover_parser()
    parser.prog, parser.description = "redrive", __doc__
    parser._option_string_actions["--dry-run"].help = "count what would be redriven; change nothing"
    return parser


def redrive_main(argv: list[str] | None, on_start: Callable[[], None] = lambda: None) -> int:
    """Parse, load, redrive, report; return the exit code. `on_start` runs after the config
    is valid and before any Redis call (the entry point starts Spark there)."""

    def body(summaries: list[Outcome]) -> None:
        args = redrive_parser().parse_args(argv)
        setup_logging(args.log_level)
        overrides = args.overrides + (["redrive.dry_run=true"] if args.dry_run else [])
        settings = load_settings(args.config, overrides)
        id_range(settings.redrive)  # an empty range is a config error: exit 2 before anything
        on_start()
        summary = RedriveSummary(args.run_id or new_run_id())
        summaries.append(summary)
        run_redrive(settings, summary)

    return exit_code_of(body, "redrive")
