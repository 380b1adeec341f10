"""A redrive run in the test process (``run_redrive``, no spark-submit)."""

from __future__ import annotations

from recovery.config import load_settings
from recovery.redrive.run import RedriveSummary, run_redrive
from recovery.testing.local_redis import LocalServer


def redrive(server: LocalServer, *overrides: str) -> RedriveSummary:
    """Redrive against `server` with ``section.field=value`` `overrides`; its summary."""
    settings = load_settings(None, [f"redis.url={server.url}", *overrides])
    return run_redrive(settings, RedriveSummary("test"))
