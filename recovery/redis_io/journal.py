"""The claim journal: which entries each part of a run claimed, kept in Redis, so that a
retried task can report what its failed attempt claimed and finished.

One Redis list per job consumer (``<journal prefix><job consumer>``, the consumer naming run
and part). The driver opens each with a header element (``run <run id>``) and a TTL before
any task runs, and deletes them when the run is over. A task appends each claim step's entry
IDs before the step's first side effect (about 20 bytes per entry), and what each hand-over
did once it is done (``recovery.executor.journaled``: its report rows). Both are held only
while the run lasts. A retried attempt reads the list: a journal without its header was
evicted or deleted, and the attempt stops rather than leave entries unreported.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import redis
from redis.exceptions import NoPermissionError, ResponseError

from recovery.errors import RecoveryError
from recovery.redis_io.streams import each

log = logging.getLogger(__name__)

HEADER = b"run "
CLAIM = b"c"  # then JSON: ["<stream>", "<group>", ["<id>", ...]]
OUTCOME = b"o"  # then the outcome's bytes (opaque here)
TTL_S = 7 * 24 * 3600  # a killed run's journal goes away on its own after a week
READ_PAGE = 100  # list elements (claim steps) per LRANGE when a retried attempt reads


UnitKey = tuple[str, str]  # (stream, group)


@dataclass
class Earlier:
    """What earlier attempts journaled: the IDs they claimed, by unit, and the outcomes they
    recorded (opaque bytes, in the order recorded)."""

    claimed: dict[UnitKey, set[str]] = field(default_factory=dict)
    outcomes: list[bytes] = field(default_factory=list)


class JournalLostError(RecoveryError):
    """A retried task found its run's journal gone (exit 1)."""


def journal_key(prefix: str, consumer: str) -> str:
    """The journal of one part of a run: `prefix` then its job consumer's name."""
    return prefix + consumer


def open_journals(client: redis.Redis, keys: Sequence[str], run_id: str) -> str | None:
    """Create the run's journals (header and TTL) and read one back, in one round trip per
    thousand commands. Returns None when they are usable, else the server's refusal (an
    ACL user without the journal's keys or commands): the run then takes the path that
    needs no journal. Other errors are raised."""
    commands: list[tuple[object, ...]] = []
    for key in keys:
        commands += [("RPUSH", key, HEADER + run_id.encode()), ("EXPIRE", key, TTL_S),
                     ("LRANGE", key, 0, 0)]
    for reply in each(client, commands):
        if isinstance(reply, NoPermissionError) or (
                isinstance(reply, ResponseError) and str(reply).startswith("NOPERM")):
            return str(reply).splitlines()[0]
        if isinstance(reply, Exception):
            raise reply
    return None


def drop_journals(client: redis.Redis, keys: Sequence[str]) -> None:
    """Delete the run's journals; what cannot be deleted expires (logged, not raised: this
    runs also after a failed run, whose own error must come out)."""
    try:
        replies = each(client, [("DEL", key) for key in keys])
    except redis.RedisError as exc:
        replies = [exc]
    failed = [r for r in replies if isinstance(r, Exception)]
    if failed:
        log.warning("%d claim journal(s) not deleted (they expire in %d s): %s", len(failed),
                    TTL_S, failed[0])


def record_claims(client: redis.Redis, key: str,
                  steps: Sequence[tuple[UnitKey, Iterable[str]]]) -> None:
    """Append claim steps' entry IDs (one element per step) to the journal `key`, in one
    RPUSH (one round trip)."""
    client.rpush(key, *(CLAIM + json.dumps([*unit, list(ids)]).encode() for unit, ids in steps))


def record_outcome(client: redis.Redis, key: str, outcome: bytes) -> None:
    """Append what one hand-over did to its entries (`outcome`, opaque) to the journal `key`."""
    client.rpush(key, OUTCOME + outcome)


def read(client: redis.Redis, key: str) -> Earlier:
    """What the journal `key` holds. Raises JournalLostError when the journal has no header
    (evicted or deleted while the run went on)."""
    found = Earlier()
    start = 0
    while True:
        elements: list[bytes] = client.execute_command("LRANGE", key, start,
                                                       start + READ_PAGE - 1)
        if start == 0 and not (elements and elements[0].startswith(HEADER)):
            raise JournalLostError(
                f"the run's claim journal {key} is gone from Redis (evicted or deleted), so a "
                "retried task cannot know what its failed attempt did: run the job again "
                "(nothing is lost; entries not yet handled stay pending), and keep Redis from "
                "evicting keys (maxmemory-policy noeviction)")
        for element in elements[1:] if start == 0 else elements:
            _add(found, element)
        if len(elements) < READ_PAGE:
            return found
        start += READ_PAGE


def _add(found: Earlier, element: bytes) -> None:
    """Add one claim or outcome element to `found`."""
    if element.startswith(CLAIM):
        stream, group, ids = json.loads(element[1:])
        found.claimed.setdefault((stream, group), set()).update(ids)
    elif element.startswith(OUTCOME):
        found.outcomes.append(element[1:])
