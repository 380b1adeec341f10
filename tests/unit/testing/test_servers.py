"""The servers the tests start behave as ``tests/support/servers.py`` declares: each declared
feature is seen (or its absence is) on every flavor, the newest (Redis 8.0, Valkey 9.1 and
Redis 8.6 from Debian's packages, recovery.testing.debian_servers) included, and what the
job's probe (recovery.redis_io.features) says a server has is what it does, so the tests
that branch on ``has(client, FEATURE)`` branch on what the server really does."""

from __future__ import annotations

import pickle

import pytest
from redis import Redis
from redis.exceptions import NoPermissionError, ResponseError

from recovery.testing.debian_servers import SERVERS
from recovery.testing.local_redis import LocalServer
from tests.support.servers import (
    ACL_LOG_SUBCOMMANDS,
    CLAIM_DROPS_DELETED,
    NEWEST,
    ON_NEWEST_TOO,
    SCRIPT_ERRORS_KEEP_THEIR_CODE,
    features,
    has,
    server_version,
    start_server,
)


@ON_NEWEST_TOO
def test_every_flavor_reports_a_version_from_6_2(server: LocalServer) -> None:
    assert server_version(server.client())[:2] >= (6, 2)


@pytest.mark.parametrize("flavor", NEWEST)
def test_the_newest_flavors_are_the_versions_declared(flavor: str) -> None:
    """INFO server of the launcher `make servers` wrote: Redis 8.0.x, Valkey 9.1.x."""
    declared = SERVERS[flavor]
    with start_server(flavor) as server:
        info = server.client().info("server")
    assert str(info[declared.version_field]).startswith(declared.version), info


@ON_NEWEST_TOO
def test_acl_log_subcommands(server: LocalServer) -> None:
    client = server.client()
    client.execute_command("ACL", "SETUSER", "narrow", "on", ">pw", "~*", "+xinfo|groups")
    client.xadd("s", {"f": "v"})
    narrow = Redis(port=server.port, username="narrow", password="pw")
    try:
        with pytest.raises(NoPermissionError):
            narrow.xinfo_stream("s")
    finally:
        narrow.close()
    objects = [e["object"] for e in client.acl_log()  # not redis-py's CLIENT SETINFO
               if e["username"] == "narrow" and e["object"].startswith("xinfo")]
    assert objects == ["xinfo|stream" if has(client, ACL_LOG_SUBCOMMANDS) else "xinfo"]


@ON_NEWEST_TOO
def test_claim_drops_deleted(server: LocalServer) -> None:
    client = server.client()
    first, second = (client.xadd("s", {"n": str(i)}) for i in range(2))
    client.xgroup_create("s", "g", id="0")
    client.xreadgroup("g", "gone", {"s": ">"})
    client.xdel("s", first)
    client.xautoclaim("s", "g", "job", 0)
    pending = [r["message_id"] for r in client.xpending_range("s", "g", "-", "+", 10)]
    assert pending == ([second] if has(client, CLAIM_DROPS_DELETED) else [first, second])


@ON_NEWEST_TOO
def test_script_errors_keep_their_code(server: LocalServer) -> None:
    client = server.client()
    client.xadd("s", {"f": "v"})
    with pytest.raises(ResponseError) as raised:
        client.eval("return redis.call('XGROUP', 'CREATECONSUMER', KEYS[1], 'none', 'c')",
                    1, "s")
    keeps = str(raised.value).startswith("NOGROUP ")
    assert keeps is has(client, SCRIPT_ERRORS_KEEP_THEIR_CODE), str(raised.value)


@ON_NEWEST_TOO
def test_what_the_probe_says_each_server_has_is_what_it_does(server: LocalServer) -> None:
    """ServerFeatures (COMMAND INFO / DOCS) against the server itself: XACKDEL acks and
    deletes where it is said to exist and is an unknown command elsewhere; XINFO CONSUMERS
    shows ``inactive`` where said; XREADGROUP takes CLAIM and XADD takes IDMP where said;
    Valkey is told apart whatever ``redis_version`` it reports."""
    client = server.client()
    found = features(client)
    assert pickle.loads(pickle.dumps(found)) == found, "it travels to the executors"
    info = client.info("server")
    assert found.server == ("valkey" if "valkey_version" in info else "redis")
    assert found.asked and found.xautoclaim
    client.xadd("s", {"f": "v"}, id="1-0")
    client.xgroup_create("s", "g", id="0")
    client.xreadgroup("g", "c", {"s": ">"})
    assert ("inactive" in client.xinfo_consumers("s", "g")[0]) is found.consumer_inactive
    tried = {
        "xackdel": ("XACKDEL", "s", "g", "ACKED", "IDS", 1, "1-0"),
        "xreadgroup_claim": ("XREADGROUP", "GROUP", "g", "c", "CLAIM", 0, "STREAMS", "s", ">"),
        "xadd_idmp": ("XADD", "s", "IDMP", "p", "i", "*", "f", "v"),
    }
    for field, command in tried.items():
        try:
            reply = client.execute_command(*command)
        except ResponseError as exc:
            assert not getattr(found, field), (field, str(exc))
        else:
            assert getattr(found, field), (field, reply)
    assert (client.xlen("s") == (1 if found.xadd_idmp else 0) + (0 if found.xackdel else 1))


def test_a_user_refused_command_gets_the_features_of_its_version(redis_server: LocalServer
                                                                  ) -> None:
    """ACL rules without COMMAND (docs/ACL.md line 7 left out): the probe does not fail;
    the reply changes follow redis_version and no optional command counts."""
    client = redis_server.client()
    client.execute_command("ACL", "SETUSER", "nocmd", "on", ">pw", "~*", "+info")
    narrow = Redis(port=redis_server.port, username="nocmd", password="pw")
    try:
        found = features(narrow)
    finally:
        narrow.close()
    assert not found.asked and found.xautoclaim and found.claim_reports_deleted
    assert not found.xackdel and not found.consumer_inactive
