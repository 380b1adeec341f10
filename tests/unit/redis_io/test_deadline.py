"""Every Redis reply bounded whole (recovery.redis_io.deadline): a real server behind a proxy
that answers one byte (or a chunk) at a time (tests/support/redis_drip.py), each byte well
within the per-read ``socket_timeout``. Each test shows the fault is real (redis-py alone
waits the whole reply out), that the call ended by its bound and not by the reply's end (the
proxy saw the client give up halfway: ``cut``): both reply parsers, TLS, a cluster's node
connections, and a big reply on a slow but honest link. Whole runs through the drip:
tests/integration/attacks/test_attack_dripping_redis.py."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
import redis
from redis._parsers import _HiredisParser, _RESP2Parser
from redis.backoff import NoBackoff
from redis.retry import Retry

from recovery.params import RedisParams
from recovery.redis_io.deadline import (
    RATE_OPTION,
    BoundedConnection,
    BoundedSocket,
    standalone_options,
)
from recovery.redis_io.redis_conn import connect
from recovery.settings.model import load_settings, redis_params
from recovery.testing.backlog import add_entries, create_group, deliver
from tests.support.backlogs import DEAD
from tests.support.cluster_fixtures import LocalCluster
from tests.support.fault_tools import GROUP, pending_per_consumer
from tests.support.redis_drip import DrippingRedis, cut_seen

PARSERS = {"hiredis": _HiredisParser, "python": _RESP2Parser}
GIVE_UP = "the reply was not done within"
# The job's client: 3 retries after the first attempt, backoff 0.1, 0.2, 0.4 s (redis_conn).
ATTEMPTS, BACKOFF_S = 4, 0.7


def bounded_client(url: str, timeout_s: float, parser: type, rate: float = 65536.0
                   ) -> redis.Redis:
    """A client of bounded connections (no retry, RESP2: no handshake) with `parser`."""
    options = {"socket_timeout": timeout_s, "socket_connect_timeout": 2, "protocol": 2,
               "retry": Retry(NoBackoff(), 0), "parser_class": parser, RATE_OPTION: rate}
    return redis.Redis.from_url(url, **standalone_options(url, options))


def gave_up_its_socket(client: redis.Redis) -> bool:
    """Whether `client` closed the socket of the call that failed: no connection in use, none
    still holding one. (Checked on the client: a loaded machine let the dripping proxy see
    the close only after its own 10 s wait, twice in clean-clone runs.)"""
    pool = client.connection_pool
    return not pool._in_use_connections and all(  # type: ignore[attr-defined]
        c._sock is None for c in pool._available_connections)  # type: ignore[attr-defined]


def timed(call: Callable[[], Any]) -> tuple[Any, float]:
    started = time.monotonic()
    result = call()
    return result, time.monotonic() - started


def timed_failure(call: Callable[[], Any]) -> tuple[str, float]:
    """The redis.TimeoutError `call` raises, and when."""
    started = time.monotonic()
    with pytest.raises(redis.TimeoutError) as raised:
        call()
    return str(raised.value), time.monotonic() - started


@pytest.mark.slow
@pytest.mark.parametrize("parser", PARSERS.values(), ids=PARSERS.keys())
def test_a_reply_dripped_a_byte_at_a_time_ends_by_its_bound(parser, redis_server):
    """A 67-byte reply at 50 bytes/s, socket timeout 0.5 s: redis-py alone reads it whole in
    1.3 s (every byte within its read's timeout); the bounded connection gives up at 0.5 s,
    halfway, with one line that names the rule. Both parsers read through the same socket."""
    redis_server.client().set("k", "v" * 60)
    with DrippingRedis(redis_server.port, interval_s=0.02) as drip:
        plain = redis.Redis.from_url(drip.url, socket_timeout=0.5, protocol=2,
                                     parser_class=parser, retry=Retry(NoBackoff(), 0))
        value, plain_took = timed(lambda: plain.get("k"))
        plain.close()
        assert value == b"v" * 60 and plain_took > 1.2, plain_took  # the fault is real
        dripped_before = drip.dripped
        message, took = timed_failure(lambda: bounded_client(drip.url, 0.5, parser).get("k"))
        assert GIVE_UP in message and "redis.socket_timeout_s 0.5 s" in message, message
        assert 0.5 <= took < 0.8, took
        assert 10 < drip.dripped - dripped_before < 67  # bytes did come, not all of them
        assert cut_seen(drip, 1) == 1


@pytest.mark.slow
def test_a_big_reply_on_a_slow_honest_link_arrives_and_a_slower_link_is_a_timeout(
        redis_server):
    """XAUTOCLAIM COUNT 1000 of 1000 entries of 500 bytes (a reply of about 600 KB) through
    a link of 160 KB/s, socket timeout 1 s: it takes several socket timeouts and arrives
    whole, since at the default 64 KiB/s it is allowed 10 s. The same size with
    ``min_transfer_bytes_per_s`` 1 MB/s (1.6 s allowed) is a timeout."""
    client = redis_server.client()
    create_group(client, "big", GROUP)
    ids = add_entries(client, "big", 1000, lambda i: {"payload": f"{i:06d}".encode() * 83})
    deliver(client, "big", GROUP, DEAD, 1000)
    with DrippingRedis(redis_server.port, interval_s=0.05, chunk=8192) as drip:
        honest = connect(RedisParams(url=drip.url, socket_timeout_s=1, connect_timeout_s=1,
                                     cluster=False))
        reply, took = timed(lambda: honest.execute_command(
            "XAUTOCLAIM", "big", GROUP, "job", 0, "0-0", "COUNT", 1000))
        honest.close()
        assert took > 2.5, took  # longer than the socket timeout, whole
        assert [entry[0].decode() for entry in reply[1]] == ids
        assert all(entry[1][1] == f"{i:06d}".encode() * 83
                   for i, entry in enumerate(reply[1]))
        assert pending_per_consumer(client, ["big"], GROUP) == Counter({"job": 1000})
        slower = bounded_client(drip.url, 1, _HiredisParser, rate=1_000_000)
        message, took = timed_failure(lambda: slower.xrange("big"))
        assert GIVE_UP in message and 1.0 < took < 2.2, (message, took)
        assert gave_up_its_socket(slower)  # (the proxy's count of the cut: see cut_seen)


@pytest.mark.slow
def test_a_tls_reply_whose_records_each_come_in_time_is_still_bounded_whole(
        tls_files, tls_redis):
    """Over TLS a dripping proxy can only delay whole records (a TLS read waits for one
    record, bounded by the socket timeout): 64 KB in 16 KB records at 20 KB/s, each record
    within the 1 s socket timeout, 3 s in all. redis-py alone reads it whole; the job's
    client (``rediss://``: the TLS connection class) gives up each of its 4 attempts at
    its bound."""
    tls_redis.client().set("k", b"x" * 65536)
    tls = {"ssl_ca_certs": str(tls_files.ca), "ssl_certfile": str(tls_files.client_cert),
           "ssl_keyfile": str(tls_files.client_key)}
    with DrippingRedis(tls_redis.port, interval_s=0.05, chunk=1024) as drip:
        url = drip.url.replace("redis://", "rediss://")
        plain = redis.Redis.from_url(url, socket_timeout=1, protocol=2,
                                     retry=Retry(NoBackoff(), 0), **tls)
        value, plain_took = timed(lambda: plain.get("k"))
        plain.close()
        assert value == b"x" * 65536 and plain_took > 2.5, plain_took
        client = connect(RedisParams(
            url=url, socket_timeout_s=1, connect_timeout_s=1, min_transfer_bytes_per_s=1e6,
            tls_ca_file=str(tls_files.ca), tls_cert_file=str(tls_files.client_cert),
            tls_key_file=str(tls_files.client_key), cluster=False))
        message, took = timed_failure(lambda: client.get("k"))
        assert GIVE_UP in message, message
        # each attempt: about 0.5 s to connect through the proxy (TLS handshake, CLIENT
        # SETNAME), then the 1 s bound; redis-py alone would read each attempt's reply whole
        assert took < ATTEMPTS * 2 + BACKOFF_S, took
        assert cut_seen(drip, ATTEMPTS) == ATTEMPTS


def test_a_clusters_node_connections_are_bounded(redis_cluster: LocalCluster):
    """The cluster client builds each node's pool from the URL: its connections are the
    bounded ones all the same (rediss://: tests/test_tls.py)."""
    client = connect(RedisParams(url=redis_cluster.url, socket_timeout_s=2))
    for node in client.get_primaries():  # type: ignore[attr-defined]
        pool = client.get_redis_connection(node).connection_pool  # type: ignore[attr-defined]
        conn = pool.get_connection()
        try:
            conn.send_command("PING")
            assert conn.read_response() == b"PONG"
            assert type(conn) is BoundedConnection and isinstance(conn._sock, BoundedSocket)
        finally:
            pool.release(conn)
    client.close()


def test_redis_params_carry_the_rate_to_the_executors():
    """``redis.min_transfer_bytes_per_s`` reaches RedisParams (what executors connect with)."""
    settings = load_settings(None, ["redis.min_transfer_bytes_per_s=1000", "streams.keys=s"])
    assert redis_params(settings).min_transfer_bytes_per_s == 1000
