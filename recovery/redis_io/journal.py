"""The claim journal: which entries each part of a run claimed, kept in Redis, so that a
retried task can report what its failed attempt claimed and finished.

One Redis list per job consumer (``<journal prefix><job consumer>``, the consumer naming run
and part). The driver opens each with a header element (``run <run id>``) and a TTL before
any task runs, and deletes them when the run is over. A task appends each claim step's entry
IDs before the step's first side effect (about 20 bytes per entry), and what each hand-over
did once it is done (``recovery.executor.claim.journaled``: its report rows). Both are held only
while the run lasts. A retried attempt reads the list: a journal without its header was
evicted or deleted, one with a second header holds two runs' elements (a run ID reused,
which the driver refuses: ``recovery.driver.run_ids``), and either way the attempt stops rather than
report what it cannot trust. Elements are read with their positions in the list: a row
recorded before the entry's last claim no longer describes it
(``recovery.executor.claim.journaled``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import redis
from redis.exceptions import NoPermissionError, ResponseError

from recovery.errors import RecoveryError
from recovery.redis_io.error_codes import first_refusal
from recovery.redis_io.round_trips import each
from recovery.redis_io.streams import drop_keys

HEADER = b"run "
CLAIM = b"c"  # then JSON: ["<stream>", "<group>", ["<id>", ...]]
OUTCOME = b"o"  # then the outcome's bytes (opaque here)
TTL_S = 7 * 24 * 3600  # a killed run's journal goes away on its own after a week
READ_PAGE = 100  # list elements (claim steps) per LRANGE when a retried attempt reads


UnitKey = tuple[str, str]  # (stream, group)


@dataclass
class Earlier:
    """What earlier attempts journaled, each element known by its position in the list (the
    header is 0): the IDs they claimed, by unit, each with the position of its last claim;
    and the outcomes they recorded (opaque bytes), each with its position, in order."""

    claimed: dict[UnitKey, dict[str, int]] = field(default_factory=dict)
    outcomes: list[tuple[int, bytes]] = field(default_factory=list)


class JournalLostError(RecoveryError):
    """A retried task found its run's journal gone (exit 1)."""


class JournalConflictError(RecoveryError):
    """A retried task found another run's elements in its run's journal (exit 1)."""


def journal_key(prefix: str, consumer: str) -> str:
    """The journal of one part of a run: `prefix` then its job consumer's name."""
    return prefix + consumer


def journal_in_redis(client: redis.Redis, key: str) -> bool | None:
    """Whether the journal `key` is in Redis (a run with its run ID was killed, its journal
    expiring a week after it started, or is still running); None when the ACL user may not
    read it (such a user cannot keep one either)."""
    try:
        first: list[bytes] = client.execute_command("LRANGE", key, 0, 0)
    except ResponseError as exc:  # NoPermissionError included
        if isinstance(exc, NoPermissionError) or str(exc).startswith("NOPERM"):
            return None
        raise
    return bool(first)


def open_journals(client: redis.Redis, keys: Sequence[str], run_id: str) -> str | None:
    """Create the run's journals (header and TTL) and read one back, in one round trip per
    thousand commands. Returns None when they are usable, else the server's refusal (an
    ACL user without the journal's keys or commands): the run then takes the path that
    needs no journal. Other errors are raised."""
    commands: list[tuple[object, ...]] = []
    for key in keys:
        commands += [("RPUSH", key, HEADER + run_id.encode()), ("EXPIRE", key, TTL_S),
                     ("LRANGE", key, 0, 0)]
    return first_refusal(each(client, commands))


def drop_journals(client: redis.Redis, keys: Sequence[str]) -> None:
    """Delete the run's journals; what cannot be deleted expires (logged, not raised)."""
    drop_keys(client, keys, "claim journal(s)", TTL_S)


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
    (evicted or deleted while the run went on), JournalConflictError when it has a second
    one (another run's elements)."""
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
        for at, element in enumerate(elements, start=start):
            if at:
                _add(found, key, at, element)
        if len(elements) < READ_PAGE:
            return found
        start += READ_PAGE


def _add(found: Earlier, key: str, at: int, element: bytes) -> None:
    """Add the claim or outcome element at position `at` of the journal `key` to `found`."""
    if element.startswith(CLAIM):
        stream, group, ids = json.loads(element[1:])
        found.claimed.setdefault((stream, group), {}).update(dict.fromkeys(ids, at))
    elif element.startswith(OUTCOME):
        found.outcomes.append((at, element[1:]))
    elif element.startswith(HEADER):
        raise JournalConflictError(
            f"the run's claim journal {key} holds the elements of two runs (its run ID was "
            "used again while the other run's journal was there), so a retried task cannot "
            "tell what its failed attempt did: run the job again with a new --run-id "
            "(nothing is lost; entries not yet handled stay pending)")
