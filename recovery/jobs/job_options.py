"""The options every job takes, and how they are read: ``--config``, ``--set``, ``--run-id``,
``--scheduler-run-id``, ``--log-level``, ``--print-config``, ``--version``. A bad option is a
:class:`BadArguments` (exit 2, one line on stderr), never argparse's own exit; the command
line's other commands (``config``, ``console``, ``init``: :mod:`recovery.cli`) parse with
the same pieces."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from recovery import __version__
from recovery.errors import EXIT_BAD_INPUT, RecoveryError

if TYPE_CHECKING:  # the settings model (pydantic) is loaded with the settings, not before
    from recovery.settings.model import Settings

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
SCHEDULER_RUN_ID_MAX = 250


class ArgumentParser(argparse.ArgumentParser):
    """argparse that raises instead of exiting, so bad arguments get our one-line error."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise BadArguments(f"{self.prog}: {message} (see --help)")


class BadArguments(RecoveryError):
    """A command line that cannot be read: exit 2, before anything is touched."""

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
    from recovery.settings.model import effective_config, load_settings

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
    """The job's own logs (``recovery.*``) at `level` on stderr; other libraries' at WARNING."""
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("recovery").setLevel(level.upper())
