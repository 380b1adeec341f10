"""Recover stuck messages from Redis Streams consumer groups with PySpark.

The public face, for notebooks, scheduler scripts and handler authors::

    import recovery

    settings = recovery.load_settings(None, ["redis.url=redis://host:6379/0",
                                             "streams.match=orders:*"])
    spark = recovery.local_session("local[2]", "my-notebook")   # or your own session
    pending = recovery.pending_entries(spark, settings)  # DataFrame: what a run would do
    summary = recovery.run(spark, settings)              # claims, moves, acks; RunSummary
    print(recovery.format_table(summary))
    letters = recovery.read_dead_letters(spark, settings)  # DataFrame: one row per dead letter

A handler is ``def handle(messages: list[recovery.Message]) -> list[recovery.Result]``.
Everything else in the package is internal and may move. The names below load on first
use, so ``import recovery`` stays light: Spark's Python workers import the package's
executor-side modules and must not load the driver side (pydantic, the settings).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_HOMES = {
    # settings
    "Settings": "recovery.settings.model",
    "load_settings": "recovery.settings.model",
    # running it
    "run": "recovery.driver.job",
    "pending_entries": "recovery.driver.job",
    "local_session": "recovery.spark.local",
    "RunSummary": "recovery.report.summary",
    "format_table": "recovery.report.summary",
    "read_run": "recovery.report.run_report",
    "ACTIONS": "recovery.executor.handover.modes",
    "PLAN_ACTIONS": "recovery.executor.handover.modes",
    "Action": "recovery.vocabulary",
    "DeathReason": "recovery.vocabulary",
    "Mode": "recovery.vocabulary",
    "REPORT": "recovery.schemas",
    # dead letters as data
    "read_dead_letters": "recovery.dead_letters.run",
    "run_dead_letters": "recovery.dead_letters.run",
    "dead_letter_views": "recovery.dead_letters.views",
    "health_trend": "recovery.dead_letters.trend",
    "DeadLetterSummary": "recovery.dead_letters.report",
    "run_redrive": "recovery.redrive.run",
    "RedriveSummary": "recovery.redrive.report",
    "DEAD_LETTER": "recovery.schemas",
    # the handler contract
    "Message": "recovery.handlers",
    "Result": "recovery.handlers",
    # errors (each with its exit code)
    "RecoveryError": "recovery.errors",
    "ConfigError": "recovery.errors",
    "RedisUnavailableError": "recovery.errors",
    "RedisAuthError": "recovery.errors",
    "RedisPermissionError": "recovery.errors",
    "UnsupportedServerError": "recovery.errors",
    "HandlerError": "recovery.errors",
    "FailureThresholdError": "recovery.errors",
}
__all__ = [  # the same names as _HOMES (tests/unit/test_public_api.py holds them together)
    "ACTIONS",
    "DEAD_LETTER",
    "PLAN_ACTIONS",
    "REPORT",
    "Action",
    "ConfigError",
    "DeadLetterSummary",
    "DeathReason",
    "FailureThresholdError",
    "HandlerError",
    "Message",
    "Mode",
    "RecoveryError",
    "RedisAuthError",
    "RedisPermissionError",
    "RedisUnavailableError",
    "RedriveSummary",
    "Result",
    "RunSummary",
    "Settings",
    "UnsupportedServerError",
    "__version__",
    "dead_letter_views",
    "format_table",
    "health_trend",
    "load_settings",
    "local_session",
    "pending_entries",
    "read_dead_letters",
    "read_run",
    "run",
    "run_dead_letters",
    "run_redrive",
]

if TYPE_CHECKING:
    from recovery.dead_letters.report import DeadLetterSummary
    from recovery.dead_letters.run import read_dead_letters, run_dead_letters
    from recovery.dead_letters.trend import health_trend
    from recovery.dead_letters.views import dead_letter_views
    from recovery.driver.job import pending_entries, run
    from recovery.errors import (
        ConfigError,
        FailureThresholdError,
        HandlerError,
        RecoveryError,
        RedisAuthError,
        RedisPermissionError,
        RedisUnavailableError,
        UnsupportedServerError,
    )
    from recovery.executor.handover.modes import ACTIONS, PLAN_ACTIONS
    from recovery.handlers import Message, Result
    from recovery.redrive.report import RedriveSummary
    from recovery.redrive.run import run_redrive
    from recovery.report.run_report import read_run
    from recovery.report.summary import RunSummary, format_table
    from recovery.schemas import DEAD_LETTER, REPORT
    from recovery.settings.model import Settings, load_settings
    from recovery.spark.local import local_session
    from recovery.vocabulary import Action, DeathReason, Mode


def __getattr__(name: str) -> Any:
    """Load a public name from its module on first use (PEP 562)."""
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'recovery' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
