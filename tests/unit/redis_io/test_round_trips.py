"""Commands sent in one write without redis-py's Pipeline (recovery.redis_io.round_trips),
against a real server: replies in order, errors returned in place (in a MULTI/EXEC too), and
when the connection is lost before the replies arrive the commands are sent once more (the
client's retry policy), as redis-py's Pipeline would."""

from __future__ import annotations

import pytest
from redis.exceptions import DataError, ResponseError

from recovery.params import RedisParams
from recovery.redis_io.redis_conn import connect
from recovery.redis_io.round_trips import each, exchange, send, send_transaction, transaction
from recovery.redis_io.streams import info_rows
from tests.support.lost_reply import ReplyDropper


def test_replies_in_order_errors_in_place_and_a_lost_reply_sent_again(server):
    admin = server.client()
    admin.xadd("s", {"f": "v"})
    admin.set("text", "x")
    proxy = ReplyDropper(server.port, b"XLEN", nth=1)
    client = connect(RedisParams(url=proxy.url()))
    try:
        replies = each(client, [("XLEN", "s"), ("XLEN", "text"), ("EXPIRE", "missing", 10),
                                ("RPUSH", "list", "a")])
    finally:
        client.close()
        proxy.close()
    assert proxy.dropped == 1
    assert replies[0] == 1 and replies[2] is False
    assert "WRONGTYPE" in str(replies[1])
    assert replies[3] == 2  # sent twice: the first write ran before its replies were lost
    assert admin.lrange("list", 0, -1) == [b"a", b"a"]


def test_a_transaction_answers_in_place_and_a_refused_command_runs_nothing(server):
    """MULTI/EXEC sent as one write: raw replies in order, a command's run-time error in its
    place (the others ran); a command refused while queued (wrong arity) raises it, and
    EXECABORT leaves Redis untouched."""
    admin = server.client()
    admin.set("text", "x")
    client = connect(RedisParams(url=server.url))
    try:
        replies = transaction(client, [("RPUSH", "list", "a"), ("XLEN", "text"),
                                       ("LRANGE", "list", 0, -1)])
        assert replies[0] == 1 and replies[2] == [b"a"]
        assert "WRONGTYPE" in str(replies[1])
        with pytest.raises(ResponseError, match="wrong number of arguments"):
            transaction(client, [("RPUSH", "list", "b"), ("XLEN",)])
    finally:
        client.close()
    assert admin.lrange("list", 0, -1) == [b"a"]


def test_a_transaction_sent_ahead_is_read_later_and_sent_again_when_its_reply_is_lost(server):
    """Written now, read after other commands ran on another connection: its replies as
    transaction's; when they are lost, the MULTI is sent once more (it ran twice)."""
    admin = server.client()
    proxy = ReplyDropper(server.port, b"MULTI", nth=1)
    client = connect(RedisParams(url=proxy.url()))
    try:
        sent = send_transaction(client, [("RPUSH", "list", "a"), ("LLEN", "list")])
        assert exchange(client, [("RPUSH", "other", "x")]) == [1]  # meanwhile, another connection
        replies = sent.replies()
    finally:
        client.close()
        proxy.close()
    assert proxy.dropped == 1
    assert replies == [2, 2]  # the second sending's: the first ran before its replies were lost
    assert admin.lrange("list", 0, -1) == [b"a", b"a"]


def test_replies_dropped_unread_never_answer_the_next_command(server):
    """A script still running when its Sent is dropped: the connection is closed, so the
    client's next command (on a pooled connection) reads its own reply, not the script's."""
    client = connect(RedisParams(url=server.url))
    busy = "local i = 0 while i < 3000000 do i = i + 1 end return 'late'"
    try:
        send(client, [("EVAL", busy, 0)]).drop()
        assert exchange(client, [("ECHO", "mine")]) == [b"mine"]
    finally:
        client.close()


def test_names_with_a_space_numbers_and_text_pack_as_redis_py_does_and_none_is_refused(
        server):
    """What the job sends: a two-word command name, ints, floats, text and bytes arguments.
    An argument no packer can send (None) is refused before anything is written."""
    admin = server.client()
    admin.xadd("s", {"f": "v"})
    admin.xgroup_create("s", "g", id="0")
    client = connect(RedisParams(url=server.url))
    try:
        groups, added, score = each(client, [("XINFO GROUPS", "s"),
                                             ("XADD", "s", "*", "é", b"\xff", "n", 7),
                                             ("ZADD", "z", 2.5, "m")])
        with pytest.raises(DataError):
            each(client, [("RPUSH", "list", "a"), ("RPUSH", "list", None)])
    finally:
        client.close()
    assert [g["name"] for g in info_rows(groups)] == ["g"]
    fields = admin.xrange("s", added, added)[0][1]
    assert fields == {"é".encode(): b"\xff", b"n": b"7"} and score == 1
    assert admin.zscore("z", "m") == 2.5
    assert admin.exists("list") == 0
