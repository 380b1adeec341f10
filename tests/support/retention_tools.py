"""Shared by the retention tests: one retention pass of the dead-letter job, in process."""

from __future__ import annotations

from pathlib import Path

from recovery.dead_letters.retention import apply_retention
from recovery.dead_letters.run import find_dead_letter_streams
from recovery.settings.model import load_settings, redis_params
from recovery.testing.local_redis import LocalServer


def retain(server: LocalServer, tmp_path: Path, *overrides: str) -> dict:
    """Retention over the dead-letter streams the settings `overrides` select on `server`
    (reports under `tmp_path`): the summary's ``retention``."""
    settings = load_settings(None, [f"redis.url={server.url}", f"report.path={tmp_path / 'r'}",
                                    *overrides])
    streams, _ = find_dead_letter_streams(settings, redis_params(settings))
    report = apply_retention(redis_params(settings), streams, settings.dead_letters)
    assert report is not None
    return report
