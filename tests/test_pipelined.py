"""Commands sent in one write without redis-py's Pipeline (recovery.redis_io.pipelined),
against a real server: replies in order, errors returned in place, and when the connection
is lost before the replies arrive the commands are sent once more (the client's retry
policy), as redis-py's Pipeline would."""

from __future__ import annotations

from recovery.params import RedisParams
from recovery.redis_io.redis_conn import connect
from recovery.redis_io.streams import each
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
