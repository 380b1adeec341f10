"""The redrive's atomic move script: dead letters back to their source stream.

Messages never leave Redis: ``recovery/redis_io/lua/redrive.lua`` reads, filters and moves
them on the server, and the client sees cursors, counts and IDs only. IDs are ``str``
(``"<ms>-<seq>"``).
"""

from __future__ import annotations

from dataclasses import dataclass

import redis

from recovery.redis_io.retries import failed_attempts
from recovery.redis_io.scripts import scripts_for
from recovery.redis_io.streams import as_str


@dataclass(frozen=True)
class RedriveFilter:
    """Which entries of one dead-letter stream go back: those dead-lettered from `source`,
    in one of `groups` and for one of `reasons` (empty: any)."""

    source: str
    dead_letter_stream: str
    groups: tuple[str, ...] = ()
    reasons: tuple[str, ...] = ()


@dataclass(frozen=True)
class RedriveStep:
    """One script call. `cursor`: the last examined dead-letter ID, None once the range is
    exhausted; `moved`: (dead-letter ID, new source ID or None in a dry run), in ID order;
    `retried`: the call was sent again after an attempt's reply was lost, so an earlier
    attempt may have moved letters that `moved` does not hold."""

    cursor: str | None
    examined: int
    moved: list[tuple[str, str | None]]
    retried: bool = False


def redrive_step(client: redis.Redis, flt: RedriveFilter, start: str, end: str,
                 examine: int, max_moves: int, dry_run: bool) -> RedriveStep:
    """Examine up to `examine` dead-letter entries in [start, end] (XRANGE bounds; ``(id``
    excludes) and move up to `max_moves` matching ones back to the source, atomically.

    Raises ResponseError ``WRONGTYPE`` (before any write) when a key is not a stream.
    """
    args: list[str | int] = [flt.source, start, end, examine, max_moves, "1" if dry_run else "0",
                             len(flt.groups), *flt.groups, len(flt.reasons), *flt.reasons]
    script = scripts_for(client)["redrive"]
    failed = failed_attempts(client)
    cursor, examined, flat = script(keys=[flt.dead_letter_stream, flt.source], args=args)
    pairs = [(as_str(flat[i]), as_str(flat[i + 1]) or None) for i in range(0, len(flat), 2)]
    return RedriveStep(as_str(cursor) or None, int(examined), pairs,
                       retried=failed_attempts(client) > failed)
