"""The client's counting retry policy (recovery.redis_io.retries)."""

from __future__ import annotations

import copy

import redis
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from recovery.params import RedisParams
from recovery.redis_io.redis_conn import RedisConn
from recovery.redis_io.retries import CountingRetry, failed_attempts
from tests.support.redis_drip import DrippingRedis


def test_failed_attempts_are_counted_once_across_the_copies_of_the_policy():
    retry = CountingRetry(NoBackoff(), 3)
    clone = copy.deepcopy(retry)  # what redis-py does for each client and connection
    errors = [RedisTimeoutError("cut"), RedisConnectionError("reset")]

    def do() -> str:
        if errors:
            raise errors.pop(0)
        return "done"

    assert clone.call_with_retry(do, lambda error: None) == "done"
    assert retry.failures == [2] and clone.failures is retry.failures


def test_a_client_of_the_job_counts_a_call_retried_after_its_reply_was_cut(redis_server):
    """The job's client through a proxy whose first connection drips the reply of an ECHO:
    nothing counted while calls succeed; the ECHO's bound cuts its reply, the retry on a
    new connection is answered at once, and the count says one attempt failed."""
    with DrippingRedis(redis_server.port, interval_s=0.05, after=b"ECHO",
                       drip_connections=1) as drip:
        params = RedisParams(url=drip.url, socket_timeout_s=0.3)
        with RedisConn.open(params) as conn:
            assert conn.client.ping() and failed_attempts(conn.client) == 0
            assert conn.client.echo("x" * 100) == b"x" * 100
            assert failed_attempts(conn.client) == 1 and drip.dripping_connections == 1


def test_a_client_without_the_policy_counts_zero(redis_server):
    assert failed_attempts(redis_server.client()) == 0


def test_a_cluster_client_counts_a_call_its_own_loop_retried(redis_cluster):
    """A cluster client retries in a loop of its own: a write to a node paused for writes
    (CLIENT PAUSE WRITE) past the socket timeout times out, the loop sends it again, and
    once the pause ends it is done; the count says an attempt failed. (A write sent only
    after the pause ended, on a loaded machine, met no fault: the trial is made again, up
    to three times.)"""
    params = RedisParams(url=redis_cluster.url, socket_timeout_s=0.5)
    with RedisConn.open(params) as conn:
        client = conn.client
        assert client.set("{k}x", "1") and failed_attempts(client) == 0
        node = client.get_node_from_key("{k}x")  # type: ignore[attr-defined]
        admin = redis.Redis(host=node.host, port=node.port)
        for value in ("2", "3", "4"):
            admin.client_pause(700, all=False)
            assert client.set("{k}x", value)
            if failed_attempts(client):
                break
        admin.close()
        assert failed_attempts(client) >= 1 and client.get("{k}x") == value.encode()
