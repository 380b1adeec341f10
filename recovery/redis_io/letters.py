"""Redis commands of the dead-letter console (``recovery.console``): pages of letters by ID,
one letter, deleting letters, the source groups' health, and the console's audit stream.

IDs are ``str`` (``"<ms>-<seq>"``); fields stay ``bytes``, flat (``[name, value, ...]``), in
stream order, duplicates kept. Every read is bounded by a COUNT: no command here reads a whole
stream. Expects a client from ``recovery.redis_io.redis_conn.connect`` (raw stream replies).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import redis

from recovery.redis_io.round_trips import each
from recovery.redis_io.scripts import scripts_for
from recovery.redis_io.streams import FlatFields, as_str, info_rows, shown

Entry = tuple[str, FlatFields]  # (ID, flat fields)


def letter_page(client: redis.Redis, key: str, low: str, high: str, count: int,
                newest_first: bool) -> list[Entry]:
    """Up to `count` entries of `key` between the XRANGE bounds `low` and `high` (``(id``
    excludes), oldest first (XRANGE) or newest first (XREVRANGE, which takes them high
    first). A missing key gives []; a key of another type raises ResponseError WRONGTYPE."""
    if newest_first:
        reply = client.execute_command("XREVRANGE", key, high, low, "COUNT", count)
    else:
        reply = client.execute_command("XRANGE", key, low, high, "COUNT", count)
    return [(as_str(e[0]), list(e[1])) for e in reply]


PAGE_BYTES = 8 * 1024 * 1024  # names and values one bounded page reads at most (plus one entry)


def bounded_page(client: redis.Redis, key: str, low: str, high: str, count: int,
                 newest_first: bool, budget_bytes: int = PAGE_BYTES) -> tuple[list[Entry], bool]:
    """Like :func:`letter_page`, but the page also stops once its names and values reach
    `budget_bytes` (``lua/letter_page.lua``: one entry at a time, so huge letters never make
    a reply of count x their size). Returns (entries, whether more may follow: it stopped at
    `count` or at the budget). A key of another type raises ResponseError WRONGTYPE."""
    script = scripts_for(client)["letter_page"]
    found, more = script(keys=[key], args=["XREVRANGE" if newest_first else "XRANGE", low,
                                           high, count, budget_bytes])
    return [(as_str(e[0]), list(e[1])) for e in found], bool(int(more))


def letters_by_id(client: redis.Redis, key: str, ids: Sequence[str]) -> dict[str, FlatFields]:
    """The flat fields of each of `ids` still in `key` (XRANGE id id, pipelined); IDs gone are
    left out. Raises the first error the server answered."""
    found: dict[str, FlatFields] = {}
    for entry_id, reply in zip(ids, each(client, [("XRANGE", key, i, i) for i in ids]),
                               strict=True):
        if isinstance(reply, Exception):
            raise reply
        if reply:
            found[entry_id] = list(reply[0][1])  # type: ignore[index]
    return found


def delete_letters(client: redis.Redis, key: str, ids: Sequence[str]) -> int:
    """XDEL `ids` from `key`: how many were still there (a letter deleted twice counts once)."""
    return int(client.xdel(key, *ids)) if ids else 0


@dataclass(frozen=True)
class GroupHealth:
    """One consumer group of a source stream, read live: `pending` entries in its PEL,
    `oldest_pending_idle_ms` the idle time of its lowest pending ID (None: nothing pending),
    `consumers` it has, `lag` entries not yet delivered (None where the server has no
    ``lag``: before 7.0, or when it cannot tell)."""

    stream: str
    group: str
    pending: int
    consumers: int
    oldest_pending_idle_ms: int | None
    lag: int | None


def group_health(client: redis.Redis, sources: Sequence[str]) -> list[GroupHealth]:
    """Every group of every stream of `sources`: XINFO GROUPS per stream, then XPENDING
    ``- + 1`` per group with entries pending (two pipelined round trips). A source that is
    missing or no stream has no groups here."""
    infos = each(client, [("XINFO GROUPS", s) for s in sources])
    rows: list[tuple[str, Mapping[str, object]]] = []
    for source, reply in zip(sources, infos, strict=True):
        if not isinstance(reply, Exception):
            rows += [(source, row) for row in info_rows(reply)]  # type: ignore[arg-type]
    pending_rows = each(client, [("XPENDING", s, row["name"], "-", "+", 1) for s, row in rows
                                 if int(row["pending"]) > 0])  # type: ignore[call-overload]
    oldest = iter(pending_rows)
    found = []
    for source, row in rows:
        idle = None
        if int(row["pending"]) > 0:  # type: ignore[call-overload]
            first = next(oldest)
            idle = int(first[0][2]) if isinstance(first, list) and first else None
        lag = row.get("lag")
        found.append(GroupHealth(source, shown(row["name"]),  # type: ignore[arg-type]
                                 int(row["pending"]), int(row["consumers"]),  # type: ignore[call-overload]
                                 idle, int(lag) if isinstance(lag, int) else None))
    return found


def append_audit(client: redis.Redis, key: str, fields: Mapping[str, str], keep: int) -> str:
    """XADD one audit record to `key`, trimming it to about `keep` records (``MAXLEN ~``).
    Returns the record's ID."""
    entry: dict[Any, Any] = dict(fields)
    return as_str(client.xadd(key, entry, maxlen=keep, approximate=True))


def newest_entries(client: redis.Redis, key: str, count: int) -> list[Entry]:
    """The newest `count` entries of `key`, newest first (XREVRANGE + - COUNT)."""
    return letter_page(client, key, "-", "+", count, newest_first=True)


@dataclass(frozen=True)
class KeyShape:
    """What a key holds, for deciding whether it is the console's audit stream: `kind` (TYPE:
    ``none``, ``stream``, ``hash``...); for a stream, its number of consumer `groups` and the
    field names of its oldest and newest entries (`edge_fields`, empty lists when empty)."""

    kind: str
    groups: int
    edge_fields: list[list[bytes]]


def key_shape(client: redis.Redis, key: str) -> KeyShape:
    """TYPE of `key`, then for a stream XINFO GROUPS and its first and last entry (XRANGE /
    XREVRANGE COUNT 1): four small reads."""
    kind = as_str(client.type(key))
    if kind != "stream":
        return KeyShape(kind, 0, [])
    groups = len(client.execute_command("XINFO GROUPS", key))
    edges = [letter_page(client, key, "-", "+", 1, newest_first=n) for n in (False, True)]
    return KeyShape(kind, groups, [list(e[0][1][0::2]) for e in edges if e])
