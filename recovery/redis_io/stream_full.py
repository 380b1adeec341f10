"""One read per stream for discovery and group health: ``XINFO STREAM <key> FULL COUNT 1``.

Its reply holds the stream's length and, per group, what XINFO GROUPS tells (name, PEL size,
lag on Redis 7.0+) and, per consumer, what XINFO CONSUMERS tells, except that the server
gives times as its clock's milliseconds (``seen-time``, and ``active-time`` on Redis 7.2+ and
Valkey, -1 for never) instead of ages. The ages come from the server's clock as INFO server
tells it (``server_time_usec``; INFO, not TIME, which the ACL rules of docs/ACL.md do not
grant), read in the same round trip just before the streams' reads (once per pipeline
chunk): no larger than the ones XINFO CONSUMERS would have shown at that moment, smaller by
at most one round trip's time.
COUNT 1: one entry of the stream and of each PEL comes along (COUNT 0 would mean all).

A standalone server only: on a Redis Cluster every node has its own clock. Where the user may
not run XINFO STREAM (ACL rules from before it was granted, docs/ACL.md), or the server
answers it otherwise than Redis and Valkey do, the caller falls back to XINFO GROUPS and
XINFO CONSUMERS; the first key's read, sent alone, finds out, so the ACL LOG shows one
refusal, not one per stream.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple, cast

import redis
from redis.cluster import RedisCluster

from recovery.redis_io.redis_conn import key_refused, no_such_key, wrong_type
from recovery.redis_io.round_trips import PIPELINE_CHUNK, each
from recovery.redis_io.streams import name_text

NEVER = -1  # active-time, and XINFO CONSUMERS' inactive, for a consumer never active


class GroupSeen(NamedTuple):
    """One group as its stream's FULL read showed it: the stream's `length` (entries) and the
    group's `consumers` as XINFO CONSUMERS rows (see StreamSeen)."""

    length: int
    consumers: list[dict[str, object]]


class StreamSeen(NamedTuple):
    """One stream as its FULL read showed it: its `length` (entries), its `groups` as XINFO
    GROUPS rows (``name``, ``pending``: PEL size, ``lag`` when the server tells it), and per
    group name its `consumers` as XINFO CONSUMERS rows (``name``, ``pending``, ``idle``: ms
    since last seen, ``inactive``: ms since last active or -1, Redis 7.2+ and Valkey only).
    Names are text where they are UTF-8, else bytes (as ``info_rows`` gives them)."""

    length: int
    groups: list[dict[str, object]]
    consumers: dict[object, list[dict[str, object]]]

    def of(self, group: str) -> GroupSeen:
        """What the read showed of `group` (one of `groups`' names)."""
        return GroupSeen(self.length, self.consumers[group])


def read_streams(client: redis.Redis, keys: Sequence[str]) -> list[object] | None:
    """Per key of `keys`, in order, a StreamSeen or the error the server answered for it (no
    such key, wrong type, a key the ACL user may not access). None when this way does not
    apply: a Redis Cluster, a user that may not run XINFO STREAM, a server that answers the
    first key's read otherwise or whose INFO shows no clock (then nothing else was sent but
    that first read)."""
    if isinstance(client, RedisCluster) or not keys:
        return None
    try:
        first = _timed_reads(client, keys[:1])
    except NoClock:
        return None
    if not _answers_for_the_key(first[0]):
        return None
    return first + _timed_reads(client, keys[1:])


class NoClock(Exception):
    """The server's INFO server shows no ``server_time_usec``."""


def _answers_for_the_key(reply: object) -> bool:
    """True for a FULL read or an error about the key itself (no such key, wrong type, a
    key the ACL user may not access); False for one about the command (refused by ACL,
    unknown to the server)."""
    if isinstance(reply, Exception):
        return no_such_key(reply) or wrong_type(reply) or key_refused(reply)
    return True


def _timed_reads(client: redis.Redis, keys: Sequence[str]) -> list[object]:
    """FULL reads of `keys` with a clock read first in each pipeline chunk (``each`` sends
    ``PIPELINE_CHUNK`` commands per round trip), each parsed with its chunk's clock. The
    server runs a pipeline's commands in order, so a clock read is never later than the
    reads after it, however the chunks are sent."""
    per_chunk = PIPELINE_CHUNK - 1
    commands: list[tuple[object, ...]] = []
    for start in range(0, len(keys), per_chunk):
        commands.append(("INFO", "server"))
        commands += [("XINFO", "STREAM", key, "FULL", "COUNT", 1)
                     for key in keys[start : start + per_chunk]]
    results: list[object] = []
    now_ms = 0
    for i, reply in enumerate(each(client, commands)):
        if i % PIPELINE_CHUNK == 0:
            now_ms = _clock_ms(reply)
        else:
            results.append(reply if isinstance(reply, Exception) else stream_seen(reply, now_ms))
    return results


def _clock_ms(reply: object) -> int:
    """The server's clock in ms from an INFO server reply (redis-py's dict); its error
    raised, NoClock where it has none."""
    if isinstance(reply, Exception):
        raise reply
    usec = cast(dict[str, Any], reply).get("server_time_usec")
    if usec is None:
        raise NoClock
    return int(usec) // 1000


def stream_seen(reply: Any, now_ms: int) -> StreamSeen:
    """A raw RESP2 ``XINFO STREAM .. FULL`` reply (flat field/value lists) as a StreamSeen,
    ages measured against the server clock `now_ms`."""
    groups, consumers = [], {}
    for group in _field(reply, b"groups", start=0):
        row: dict[str, object] = {"name": name_text(group[1]),
                                  "pending": int(_field(group, b"pel-count"))}
        if b"lag" in group[2:]:
            row["lag"] = _field(group, b"lag")
        groups.append(row)
        consumers[row["name"]] = [_consumer(c, now_ms) for c in _field(group, b"consumers")]
    return StreamSeen(int(_field(reply, b"length", start=0)), groups, consumers)


def _consumer(flat: list[Any], now_ms: int) -> dict[str, object]:
    """One consumer of a FULL reply as an XINFO CONSUMERS row."""
    row: dict[str, object] = {"name": name_text(flat[1]),
                              "pending": int(_field(flat, b"pel-count")),
                              "idle": _age(int(_field(flat, b"seen-time")), now_ms)}
    if b"active-time" in flat[2:]:
        active = int(_field(flat, b"active-time"))
        row["inactive"] = NEVER if active == NEVER else _age(active, now_ms)
    return row


def _age(at_ms: int, now_ms: int) -> int:
    """ms from `at_ms` to `now_ms`; 0 for a time after `now_ms` (a consumer seen between the
    clock read and its stream's read)."""
    return max(0, now_ms - at_ms)


def _field(flat: list[Any], name: bytes, start: int = 2) -> Any:
    """The value of field `name` in a flat ``[field, value, ...]`` reply, looked for from
    position `start`: 2 skips a group's or consumer's ``name`` and its value (the only value
    that can equal a field name); 0 for the stream's own fields. Found by ``list.index``: no
    dict per reply (a read per stream)."""
    return flat[flat.index(name, start) + 1]
