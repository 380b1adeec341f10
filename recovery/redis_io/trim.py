"""The commands of a dead-letter stream's retention, one function per command or script: the
server's clock, the ID that starts the newest entries of a stream, and the checked, exact MINID
trim of letters (``lua/trim_letters.lua``).

IDs are ``str`` (``"<ms>-<seq>"``); times are epoch milliseconds of the server's clock, the
clock that stamps entry IDs. Reads go in pages (``COUNT``), never the whole stream in one reply.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import redis
from redis.cluster import RedisCluster
from redis.commands.core import Script
from redis.exceptions import ConnectionError, NoScriptError, TimeoutError

from recovery.redis_io.scripts import scripts_for
from recovery.redis_io.streams import as_str


def server_time_ms(client: redis.Redis) -> int:
    """The server's clock (TIME: ``[seconds, microseconds]``) as epoch ms, rounded down. On a
    Redis Cluster every primary is asked (each stamps its own entries' IDs; redis-py would ask
    one node) and the earliest clock counts, which trims least."""
    if isinstance(client, RedisCluster):
        reply = client.time(target_nodes=RedisCluster.PRIMARIES)
    else:
        reply = client.time()
    seconds, micros = min(reply.values()) if isinstance(reply, dict) else reply
    return int(seconds) * 1000 + int(micros) // 1000


def nth_id(client: redis.Redis, key: str, n: int, newest: bool, page: int) -> str | None:
    """The ID of the `n`-th entry (1-based) of stream `key`, counted from its oldest entry
    (XRANGE) or, with `newest`, from its newest one (XREVRANGE); None when it holds fewer.
    Reads at most `n` entries, `page` per reply."""
    command, start, end = ("XREVRANGE", "+", "-") if newest else ("XRANGE", "-", "+")
    seen = 0
    while True:
        want = min(page, n - seen)
        entries = client.execute_command(command, key, start, end, "COUNT", want)
        seen += len(entries)
        if seen == n and entries:
            return as_str(entries[-1][0])
        if len(entries) < want:
            return None
        last = as_str(entries[-1][0])
        start = "(" + last


class TrimEnd(StrEnum):
    """Why one step of :func:`trim_letters` ended."""

    CUT = "cut"  # every entry below the cut passed: done
    MORE = "more"  # its budget ran out: call again from its bound
    NOT_A_LETTER = "not-a-letter"  # stopped at an entry without the metadata block
    SOURCE_NOT_SELECTED = "source-not-selected"  # stopped at a letter of another source
    GROUP_NOT_SELECTED = "group-not-selected"  # stopped at a letter of another group


@dataclass(frozen=True)
class LetterScope:
    """Whose letters retention may take: those of the selected `sources`
    (x-original-stream) and, where `groups` is not empty, of those groups only
    (x-original-group; ``streams.groups``)."""

    sources: Sequence[str]
    groups: Sequence[str] = ()


@dataclass(frozen=True)
class LetterTrim:
    """One step of :func:`trim_letters`: `passed` entries below `bound` were letters of a
    selected source (trimmed, unless a dry run), the newest of them `last` (None: none);
    `why` it ended: ``cut`` (done), ``more`` (call again from `bound`), ``not-a-letter``,
    ``source-not-selected`` or ``group-not-selected`` (stopped at the entry `bound`;
    `source`: that letter's source, or its group)."""

    passed: int
    last: str | None
    bound: str
    why: TrimEnd
    source: str | None


def trim_letters(client: redis.Redis, key: str, start: str, below: str,
                 scope: LetterScope, budget: int, dry_run: bool) -> LetterTrim:
    """One atomic step of retention on dead-letter stream `key` (trim_letters.lua): from
    `start` (inclusive; ``-``: the start), look at most at `budget` entries with an ID below
    `below`, oldest first, stop at the first that is not a letter (no metadata block) or is a
    letter outside `scope`, and ``XTRIM MINID =`` the ID it stopped at (the cut `below` when
    every entry below it passed): exactly the entries checked go, in the same script. With
    `dry_run` nothing is trimmed and the count is of what would go; a trim always starts at
    the stream's start (`start` is for a dry run's next step).

    A real step is sent once, never retried on a lost connection (:func:`_once`): sent again,
    it would find its letters gone and count 0. Raises LostTrimReply then."""
    args = [start, below, budget, "1" if dry_run else "0", len(scope.sources), *scope.sources,
            len(scope.groups), *scope.groups]
    script = scripts_for(client)["trim_letters"]
    reply = script(keys=[key], args=args) if dry_run else _once(client, script, key, args)
    passed, last, bound, why, source = reply
    shown = source.decode("utf-8", "backslashreplace") if isinstance(source, bytes) else source
    return LetterTrim(int(passed), as_str(last) or None, as_str(bound), TrimEnd(as_str(why)),
                      shown or None)


class LostTrimReply(ConnectionError):
    """The reply of a real trim step was lost: the server may have trimmed its letters."""


def _once(client: redis.Redis, script: Script, key: str, args: Sequence[object]) -> Any:
    """EVALSHA of `script` on `key`'s node, sent at most once: a connection that fails before
    the command is written is opened again (nothing ran), one that fails after it raises
    LostTrimReply (it may have run). NOSCRIPT loads the script and sends it again."""
    node = client.get_redis_connection(client.get_node_from_key(key)) \
        if isinstance(client, RedisCluster) else client
    pool = node.connection_pool
    conn = pool.get_connection()
    try:
        for _ in range(2):
            try:
                conn.send_command("EVALSHA", script.sha, 1, key, *args)
            except (ConnectionError, TimeoutError):
                conn.disconnect()
                conn.send_command("EVALSHA", script.sha, 1, key, *args)
            try:
                return conn.read_response()
            except NoScriptError:
                node.script_load(script.script)
            except (ConnectionError, TimeoutError) as exc:
                conn.disconnect()
                raise LostTrimReply(str(exc)) from None
        raise LostTrimReply("NOSCRIPT twice")
    finally:
        pool.release(conn)
