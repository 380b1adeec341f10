"""Dead letters made with the real move script, and a redrive run in the test process
(``run_redrive``, no spark-submit)."""

from __future__ import annotations

import time
from collections.abc import Sequence

import redis

from recovery.redis_io.dlq_names import dead_letter_key
from recovery.redis_io.scripts import DeadLetter, DeadLetterContext, dead_letter_units
from recovery.redrive.run import RedriveSummary, run_redrive
from recovery.settings.model import load_settings
from recovery.testing.backlog import add_entries, deliver
from recovery.testing.local_redis import LocalServer

CHUNK = 1000  # entries per move-script call


def redrive(server: LocalServer, *overrides: str) -> RedriveSummary:
    """Redrive against `server` with ``section.field=value`` `overrides`; its summary."""
    settings = load_settings(None, [f"redis.url={server.url}", *overrides])
    return run_redrive(settings, RedriveSummary("test"))


def dead_letter(client: redis.Redis, stream: str, group: str,
                payloads: list[dict[bytes, bytes]], reasons: list[str],
                errors: Sequence[str | None] | None = None) -> list[str]:
    """XADD `payloads`, deliver them to `group`, dead-letter them with the real move script
    (dead_letter.lua), with the handler's `errors` where given. The group must have read
    everything before. Their source IDs."""
    ids = add_entries(client, stream, len(payloads), lambda i: payloads[i])  # type: ignore[arg-type, return-value]
    assert deliver(client, stream, group, "c", len(ids)) == ids
    dead_letter_pending(client, stream, group, ids, reasons, errors)
    return ids


def dead_letter_pending(client: redis.Redis, stream: str, group: str, ids: list[str],
                        reasons: list[str], errors: Sequence[str | None] | None = None
                        ) -> None:
    """Dead-letter `ids`, pending for consumer ``c`` of `group`, with dead_letter.lua: 6
    deliveries of a limit of 5, 1000 ms idle, last owner ``old``, run ``run-t``, now."""
    ctx = DeadLetterContext(stream, group, "c", dead_letter_key(stream, ":dlq"), "run-t", 5,
                            int(time.time() * 1000))
    errors = errors or [None] * len(ids)
    letters = [DeadLetter(i, 6, 1000, "old", r, e)
               for i, r, e in zip(ids, reasons, errors, strict=True)]
    # Calls of CHUNK entries: one call of tens of thousands can outlast the client's socket
    # timeout on a loaded machine, and redis-py's retry of a call that did run replies 0
    # (no longer pending) for every entry it moved.
    for start in range(0, len(letters), CHUNK):
        [replies] = dead_letter_units(client, [(ctx, letters[start:start + CHUNK])])
        assert all(isinstance(r, bytes) for r in replies), sorted({repr(r) for r in replies
                                                                   if not isinstance(r, bytes)})
