"""Reads that tell whether a dead-letter move call sent again after its reply was lost had
moved an entry in its first sending (``recovery.executor.handover.resent``).

The second sending of such a call finds the entries its first sending moved no longer
pending and answers 0 for them, as for an entry another consumer acked. Only reads the
documented ACL rule grants are used (docs/ACL.md lines 2-4): INFO (the server's clock),
XPENDING of one ID, XRANGE of the source entry and of the dead-letter stream from a bound.
Times are in ms. Expects a client from ``recovery.redis_io.redis_conn.connect`` (raw stream
replies: IDs and fields as bytes, fields flat).
"""

from __future__ import annotations

from collections.abc import Collection

import redis
from redis.cluster import RedisCluster

from recovery.redis_io.commands import entry_command
from recovery.redis_io.round_trips import each
from recovery.redis_io.streams import as_str, shown

LETTER_PAGE = 200  # letters per XRANGE while looking for the run's own
MAX_PAGES = 50  # pages read at most per dead-letter stream (then: not found, uncertain)


def server_time_ms(client: redis.Redis, key: str) -> int:
    """The clock of the server holding `key` (INFO server's ``server_time_usec``, Redis 6.2+
    and Valkey), in ms since the epoch; on a Redis Cluster, the node of `key`'s slot."""
    if isinstance(client, RedisCluster):
        info = client.info("server", target_nodes=client.get_node_from_key(key))
    else:
        info = client.info("server")
    return int(info["server_time_usec"]) // 1000


def pending_ids(client: redis.Redis, stream: str, group: str, ids: Collection[str]) -> set[str]:
    """Those of `ids` pending in `group` of `stream`, whoever owns them (one ``XPENDING
    stream group id id 1`` each, pipelined); a missing stream or group: none."""
    return set(pending_owners(client, stream, group, ids))


def pending_owners(client: redis.Redis, stream: str, group: str, ids: Collection[str]
                   ) -> dict[str, str]:
    """{ID: the consumer it is pending for} of those of `ids` pending in `group` of `stream`
    (one ``XPENDING stream group id id 1`` each, pipelined: ``[[id, consumer, idle ms,
    deliveries]]``); a missing stream or group: none. A consumer name that is not UTF-8
    comes as ``shown`` makes it (backslash escapes): never one of the job's."""
    ids = list(ids)
    replies = each(client, [("XPENDING", stream, group, i, i, 1) for i in ids])
    return {entry_id: shown(reply[0][1]) for entry_id, reply in zip(ids, replies, strict=True)
            if isinstance(reply, list) and reply}


def present_ids(client: redis.Redis, stream: str, ids: Collection[str]) -> set[str]:
    """Those of `ids` still in `stream` (one ``XRANGE stream id id`` each, pipelined)."""
    ids = list(ids)
    replies = each(client, [entry_command(stream, i) for i in ids])
    return {entry_id for entry_id, reply in zip(ids, replies, strict=True)
            if isinstance(reply, list) and reply}


def run_letters(client: redis.Redis, dlq: str, since_ms: int, source: str, group: str,
                run_id: str, ids: Collection[str]) -> dict[str, str]:
    """The letters of `dlq` written at or after `since_ms` (their IDs: XRANGE from
    ``<since_ms>-0`` in pages of ``LETTER_PAGE``, at most ``MAX_PAGES``) that this run
    (``x-run-id``) moved from `source` / `group` for one of `ids` (``x-original-*``):
    {original ID: dead-letter ID}. Stops once every ID is found."""
    wanted = set(ids)
    found: dict[str, str] = {}
    start = f"{max(since_ms, 0)}-0"
    for _ in range(MAX_PAGES):
        page = client.execute_command("XRANGE", dlq, start, "+", "COUNT", LETTER_PAGE)
        for letter_id, fields in page:
            original = _own_original(fields, source, group, run_id)
            if original in wanted:
                found[original] = as_str(letter_id)
        if len(page) < LETTER_PAGE or len(found) == len(wanted):
            break
        start = "(" + as_str(page[-1][0])
    return found


def _own_original(fields: list[bytes], source: str, group: str, run_id: str) -> str | None:
    """The ``x-original-id`` of a letter's flat `fields` when it was moved by `run_id` from
    `source` / `group`, else None (the fields after the original ones: the script appends
    the metadata last, so the last value of each name is the metadata's)."""
    meta = {fields[j]: fields[j + 1] for j in range(0, len(fields) - 1, 2)}
    if (meta.get(b"x-original-stream") == source.encode()
            and meta.get(b"x-original-group") == group.encode()
            and meta.get(b"x-run-id") == run_id.encode()):
        original = meta.get(b"x-original-id")
        return None if original is None else as_str(original)
    return None
