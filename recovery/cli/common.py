"""Command-line plumbing shared by the three entry points (``jobs/recover.py``,
``jobs/redrive.py``, ``jobs/dead_letters.py``).

Exit codes (the contract with schedulers): 0 success; 2 invalid config or arguments;
1 anything else (Redis unreachable, login refused, Spark failure, failure threshold).
Errors are one line on stderr (spark-submit merges it into stdout; the installed command
refuses a bad config before spark-submit, on stderr); the last line of stdout is always a
JSON summary.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from recovery import __version__
from recovery.errors import EXIT_BAD_INPUT, EXIT_FAILURE, EXIT_OK, RecoveryError
from recovery.settings.model import Settings, effective_config, load_settings

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
SCHEDULER_RUN_ID_MAX = 250


class ArgumentParser(argparse.ArgumentParser):
    """argparse that raises instead of exiting, so bad arguments get our one-line error."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise BadArguments(f"{self.prog}: {message} (see --help)")


class BadArguments(RecoveryError):
    exit_code = EXIT_BAD_INPUT


class OnlyOnce(argparse.Action):
    """An option given once: a second value (``apply A --plan B``, ``--config a --config
    b``) is refused, never one of them silently dropped."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        if getattr(namespace, self.dest) is not None:
            raise BadArguments(f"{self.option_strings[0]} given twice "
                               f"({getattr(namespace, self.dest)} and {values}): give one")
        setattr(namespace, self.dest, values)


def common_parser(prog: str, description: str | None) -> argparse.ArgumentParser:
    """The options every entry point takes: --config, --set, --run-id, --log-level. Each job
    adds only the options it acts on; any other is refused (exit 2, before anything)."""
    parser = ArgumentParser(prog=prog, description=description)
    parser.add_argument("--config", type=Path, action=OnlyOnce,
                        help="TOML config file (`redis-stream-recovery init` writes a "
                             "commented one: conf/recovery.toml)")
    parser.add_argument("--set", dest="overrides", action="append", default=[],
                        metavar="SECTION.FIELD=VALUE", help="override one setting (repeatable)")
    parser.add_argument("--run-id", action=OnlyOnce,
                        help="run id (default: UTC time plus random suffix)")
    parser.add_argument("--scheduler-run-id", action=OnlyOnce, type=scheduler_run_id,
                        metavar="ID", help="the scheduler's own run id (Airflow's DAG run id), "
                                           "kept in full in the summary (scheduler_run_id)")
    parser.add_argument("--log-level", default="INFO", type=log_level, metavar="LEVEL",
                        help=f"log level of the job's own logs: {', '.join(LOG_LEVELS)}")
    parser.add_argument("--print-config", action="store_true",
                        help="print the effective settings (defaults, file, environment and "
                             "--set merged; secrets masked) as JSON and exit")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    return parser


def loaded_settings(args: argparse.Namespace, extra: list[str] | None = None
                    ) -> Settings | None:
    """The settings `args` name (``--config``, ``--set`` and then `extra` overrides); with
    ``--print-config``, print them (:func:`recovery.settings.model.effective_config`, one
    JSON line) and return None: the entry point then stops, exit 0, before Redis or Spark."""
    settings = load_settings(args.config, [*args.overrides, *(extra or [])])
    if not args.print_config:
        return settings
    print(json.dumps(effective_config(settings), sort_keys=True), flush=True)
    return None


def scheduler_run_id(text: str) -> str:
    """A ``--scheduler-run-id`` value: 1 to SCHEDULER_RUN_ID_MAX printable characters
    (Airflow's run ids are at most 250); any other is a bad argument (exit 2)."""
    if not 0 < len(text) <= SCHEDULER_RUN_ID_MAX or not text.isprintable():
        raise argparse.ArgumentTypeError(
            f"a scheduler run id is 1 to {SCHEDULER_RUN_ID_MAX} printable characters: "
            "pass the scheduler's run id as it is")
    return text


def log_level(text: str) -> str:
    """A ``--log-level`` value as a level name; any other is a bad argument (exit 2)."""
    if text.upper() not in LOG_LEVELS:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a log level: use one of {', '.join(LOG_LEVELS)}")
    return text.upper()


def setup_logging(level: str) -> None:
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("recovery").setLevel(level.upper())


def exit_code_of(body: Callable[[list[Outcome]], None], what: str,
                 finish: Callable[[Outcome | None, int], None] | None = None) -> int:
    """Run an entry point's `body`, which adds its summary to the list it is given as soon as
    it has one. A RecoveryError becomes its one-line error and exit code, Ctrl-C exit 1; the
    summary's JSON line (or the error's) is always stdout's last line. `finish` (the metrics
    push), if given, is called with the summary (None: none yet) and the exit code just
    before that line; it must not raise. Returns the code."""
    summaries: list[Outcome] = []
    error: str | None = None  # the error of a run without a summary, for its JSON line
    try:
        body(summaries)
        code = EXIT_OK
    except RecoveryError as exc:
        code, error = report_error(exc, summaries[0] if summaries else None, exc.exit_code)
    except KeyboardInterrupt:
        code, error = report_error(RecoveryError(f"interrupted; re-run the {what} to finish"),
                                   summaries[0] if summaries else None, EXIT_FAILURE)
    except Exception as exc:  # not one of ours (Spark cannot start, a bug): still exit 1,
        # one error line, the metrics' attempt and the JSON line; the traceback before them
        traceback.print_exc(file=sys.stderr)
        code, error = report_error(
            RecoveryError(f"the {what} failed unexpectedly: {type(exc).__name__}: "
                          f"{first_line(exc)}"),
            summaries[0] if summaries else None, EXIT_FAILURE)
    if finish is not None:  # before the JSON line: its log lines must not come after it
        finish(summaries[0] if summaries else None, code)
    if summaries:
        summaries[0].exit_code = code
        print(summaries[0].json_line(), flush=True)
    elif error is not None:
        print(json.dumps({"status": "error", "exit_code": code, "error": error}), flush=True)
    return code


class Outcome(Protocol):
    """What an entry point's summary must have for ``report_error`` and the JSON line."""

    status: str
    error: str | None
    exit_code: int

    def json_line(self) -> str: ...


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
