"""The job's Redis commands and queries (recovery.redis_io.commands) against a real Redis: each
reply as its docstring states it, compared with what the server itself says, and the read of a
stream's length and oldest entry (``head_commands`` / ``stream_head``) that the after-run state
and the dead-letter streams' inspection share."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from recovery.params import RedisParams
from recovery.redis_io.commands import (
    StreamHead,
    ack_command,
    head_commands,
    key_exists,
    key_types,
    list_items,
    oldest_entries,
    pending_summaries,
    server_run_ids,
    stream_groups,
    stream_heads,
    stream_info,
    stream_infos,
    stream_length,
    stream_lengths,
)
from recovery.redis_io.redis_conn import connect
from recovery.redis_io.round_trips import each
from recovery.redis_io.streams import as_str, info_rows
from recovery.testing.local_redis import LocalServer


@pytest.fixture
def conn(redis_server: LocalServer) -> Iterator[redis.Redis]:
    """The job's own client (raw stream replies) on a fresh Redis holding: ``s`` (entries
    1000-0, 2000-0, 3000-0; group ``g``, consumer ``c`` holding the first two), an empty
    stream ``e`` and a string ``k``."""
    setup = redis_server.client()
    for ms in (1000, 2000, 3000):
        setup.xadd("s", {"n": str(ms)}, id=f"{ms}-0")
    setup.xgroup_create("s", "g", id="0")
    setup.xreadgroup("g", "c", {"s": ">"}, count=2)
    setup.xgroup_create("e", "g", id="0", mkstream=True)
    setup.set("k", "v")
    client = connect(RedisParams(url=redis_server.url))
    yield client
    client.close()


def test_a_streams_head_is_its_length_and_oldest_entry(conn: redis.Redis) -> None:
    keys = ["s", "e", "missing", "k"]
    heads = stream_heads(each(conn, [c for key in keys for c in head_commands(key)]))
    assert heads[:3] == [StreamHead(conn.xlen("s"), 1000), StreamHead(0, None),
                         StreamHead(0, None)]
    assert isinstance(heads[3], redis.ResponseError) and "WRONGTYPE" in str(heads[3])
    assert heads[0].age_s(3500) == 2.5  # type: ignore[union-attr]
    assert heads[0].age_s(0) == 0  # type: ignore[union-attr]  # never below 0
    assert heads[1].age_s(3500) is None  # type: ignore[union-attr]


def test_each_batched_read_gives_one_reply_per_key(conn: redis.Redis) -> None:
    assert [as_str(t) for t in key_types(conn, ["s", "k", "missing"])] == [  # type: ignore[arg-type]
        "stream", "string", "none"]
    lengths = stream_lengths(conn, ["s", "e", "k"])
    assert lengths[:2] == [3, 0] and isinstance(lengths[2], redis.ResponseError)
    assert [len(r) for r in oldest_entries(conn, ["s", "e"])] == [1, 0]  # type: ignore[arg-type]
    [groups] = stream_groups(conn, ["s"])
    assert [as_str(g["name"]) for g in info_rows(groups)] == ["g"]  # type: ignore[arg-type, arg-type]
    [summary, empty] = pending_summaries(conn, [("s", "g"), ("e", "g")])
    assert summary[0] == 2 and summary[3] == [[b"c", b"2"]]  # type: ignore[index]
    assert empty[0] == 0  # type: ignore[index]
    [info, wrong] = stream_infos(conn, ["s", "k"])
    assert isinstance(info, (list, dict)) and isinstance(wrong, redis.ResponseError)


def test_an_ack_acks_only_what_is_pending(redis_server: LocalServer,
                                         conn: redis.Redis) -> None:
    assert each(conn, [ack_command("s", "g", ["1000-0", "3000-0"])]) == [1]
    assert redis_server.client().xpending("s", "g")["pending"] == 1


def test_single_reads_raise_what_the_server_answers(redis_server: LocalServer,
                                                    conn: redis.Redis) -> None:
    assert stream_length(conn, "s") == 3 and stream_length(conn, "missing") == 0
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        stream_length(conn, "k")
    stream_info(conn, "s")
    with pytest.raises(redis.ResponseError):
        stream_info(conn, "missing")
    assert key_exists(conn, "k") and not key_exists(conn, "missing")
    redis_server.client().rpush("l", "a", "b")
    assert list_items(conn, "l") == ["a", "b"] and list_items(conn, "missing") == []
    assert server_run_ids(conn) == [redis_server.client().info("server")["run_id"]]
