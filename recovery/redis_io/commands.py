"""One function per Redis command the job sends outside its Lua scripts and its claim loop.

A ``*_command`` function gives the command as a tuple, for :func:`round_trips.each` to send
batched with other commands (a round trip per ``PIPELINE_CHUNK`` commands, per node on a
Redis Cluster; each reply, or the error the server answered in its place, in order). The
other functions send their command now: one key, or one kind of command for many keys.
Replies are as the job's client gives them: raw (bytes, flat lists) for
``redis_conn.RAW_REPLY_COMMANDS``, parsed by redis-py for the others. Times are in ms.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import redis
from redis.cluster import RedisCluster

from recovery.redis_io.round_trips import each
from recovery.redis_io.streams import as_str

Command = tuple[object, ...]
Unit = tuple[str, str]  # (stream, group)


def type_command(key: str) -> Command:
    """TYPE `key`; reply: the type name (``stream``, ``none`` for no such key, ``hash``...),
    str or bytes."""
    return ("TYPE", key)


def length_command(key: str) -> Command:
    """XLEN `key`; reply: its entries (int; 0 for no such key, WRONGTYPE for another type)."""
    return ("XLEN", key)


def oldest_command(key: str) -> Command:
    """XRANGE `key` - + COUNT 1; reply (raw): ``[[id, [field, value, ...]]]``, or ``[]`` for
    an empty or missing stream."""
    return ("XRANGE", key, "-", "+", "COUNT", 1)


def stream_info_command(key: str) -> Command:
    """XINFO STREAM `key`; reply: ``[name, value, ...]`` (a dict through a cluster
    pipeline), ``last-entry`` among them; an error for a missing key or another type."""
    return ("XINFO STREAM", key)


def groups_command(stream: str) -> Command:
    """XINFO GROUPS `stream`; reply (raw): one ``[name, value, ...]`` row per group
    (``streams.info_rows`` reads them)."""
    return ("XINFO GROUPS", stream)


def consumers_command(stream: str, group: str) -> Command:
    """XINFO CONSUMERS `stream` `group`; reply (raw): one ``[name, value, ...]`` row per
    consumer (``name``, ``pending``, ``idle`` in ms; ``inactive`` ms on 7.2+)."""
    return ("XINFO CONSUMERS", stream, group)


def pending_summary_command(stream: str, group: str) -> Command:
    """XPENDING `stream` `group` (summary form); reply (raw): ``[count, min id, max id,
    [[consumer, count], ...]]`` (ids and rows None or empty for an empty PEL)."""
    return ("XPENDING", stream, group)


def entry_command(stream: str, entry_id: str) -> Command:
    """XRANGE `stream` `entry_id` `entry_id`; reply: ``[]`` when the entry is gone, else
    ``[(id, fields)]``."""
    return ("XRANGE", stream, entry_id, entry_id)


def ack_command(stream: str, group: str, ids: Sequence[str]) -> Command:
    """XACK `stream` `group` `ids`; reply: how many of them were pending (int)."""
    return ("XACK", stream, group, *ids)


def ack_delete_command(stream: str, group: str, ids: Sequence[str]) -> Command:
    """XACKDEL `stream` `group` ACKED IDS n `ids` (Redis 8.2+): ack each ID and delete it from
    the stream once no consumer group references it; reply: one code per ID (-1 not found,
    1 acked and deleted, 2 acked but kept: another group still references it)."""
    return ("XACKDEL", stream, group, "ACKED", "IDS", len(ids), *ids)


def key_types(client: redis.Redis, keys: Sequence[str]) -> list[object]:
    """:func:`type_command` of each key, pipelined: one reply (or error) per key."""
    return each(client, [type_command(k) for k in keys])


def stream_lengths(client: redis.Redis, keys: Sequence[str]) -> list[object]:
    """:func:`length_command` of each key, pipelined: one reply (or error) per key."""
    return each(client, [length_command(k) for k in keys])


def oldest_entries(client: redis.Redis, keys: Sequence[str]) -> list[object]:
    """:func:`oldest_command` of each key, pipelined: one reply (or error) per key."""
    return each(client, [oldest_command(k) for k in keys])


def stream_infos(client: redis.Redis, keys: Sequence[str]) -> list[object]:
    """:func:`stream_info_command` of each key, pipelined: one reply (or error) per key."""
    return each(client, [stream_info_command(k) for k in keys])


def stream_groups(client: redis.Redis, streams: Sequence[str]) -> list[object]:
    """:func:`groups_command` of each stream, pipelined: one reply (or error) per stream."""
    return each(client, [groups_command(s) for s in streams])


def pending_summaries(client: redis.Redis, units: Sequence[Unit]) -> list[object]:
    """:func:`pending_summary_command` of each (stream, group), pipelined: one reply (or
    error) per unit."""
    return each(client, [pending_summary_command(s, g) for s, g in units])


def stream_length(client: redis.Redis, key: str) -> int:
    """XLEN `key` now: its entries (0 for no such key); a server error is raised."""
    return int(client.execute_command(*length_command(key)))


def stream_info(client: redis.Redis, key: str) -> object:
    """XINFO STREAM `key` now (reply as :func:`stream_info_command`); an error is raised."""
    return client.execute_command(*stream_info_command(key))


def key_exists(client: redis.Redis, key: str) -> bool:
    """EXISTS `key`: whether the key is there, whatever its type."""
    return bool(client.exists(key))


def list_items(client: redis.Redis, key: str) -> list[str]:
    """LRANGE `key` 0 -1: every element of a list, as text ([] for no such key)."""
    return [as_str(item) for item in client.execute_command("LRANGE", key, 0, -1)]


def server_run_ids(client: redis.Redis) -> list[str]:
    """INFO server ``run_id`` of the server, or of each primary of a Redis Cluster, sorted
    (random, new at every start of the server process)."""
    if isinstance(client, RedisCluster):
        infos = client.info("server", target_nodes=RedisCluster.PRIMARIES)
        return sorted(str(info["run_id"]) for info in infos.values())
    return [str(client.info("server")["run_id"])]


HEAD_COMMANDS = 2  # commands :func:`head_commands` gives per stream


def head_commands(key: str) -> list[Command]:
    """The read of a stream's length and oldest entry (XLEN, XRANGE - + COUNT 1), for
    ``each``; their two replies make one :func:`stream_head`."""
    return [length_command(key), oldest_command(key)]


@dataclass(frozen=True)
class StreamHead:
    """A stream's length (entries) and the time part of its oldest entry's ID, when that
    entry was added (epoch ms; None when the stream is empty or missing)."""

    length: int
    oldest_ms: int | None

    def age_s(self, now_ms: float) -> float | None:
        """Seconds since the oldest entry was added (never below 0; 3 decimals), None when
        there is none."""
        if self.oldest_ms is None:
            return None
        return round(max(now_ms - self.oldest_ms, 0) / 1000, 3)


def stream_head(length: object, oldest: object) -> StreamHead | Exception:
    """The :class:`StreamHead` of the replies to :func:`head_commands`, or the error the
    server answered for the XLEN (no such length: another type, a refused key)."""
    if isinstance(length, Exception):
        return length
    first = oldest if isinstance(oldest, (list, tuple)) and oldest else None
    oldest_ms = int(as_str(first[0][0]).partition("-")[0]) if first else None
    return StreamHead(int(length), oldest_ms)  # type: ignore[call-overload]


def stream_heads(replies: Sequence[object]) -> list[StreamHead | Exception]:
    """:func:`stream_head` of each stream whose :func:`head_commands` replies, in order,
    make `replies`."""
    return [stream_head(replies[i], replies[i + 1])
            for i in range(0, len(replies), HEAD_COMMANDS)]
