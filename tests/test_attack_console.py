"""Attacks on the dead-letter console (issue 65) through the command a user runs: the
console as a process (``python -m recovery console``), HTTP with httpx, real Redis checked
afterwards (sources, dead-letter streams, the audit stream), not what the pages say."""

from __future__ import annotations

import pytest

from recovery.testing.local_redis import LocalServer
from tests.support.console_process import console_process
from tests.support.console_tools import DLQ, entries, seed


def _args(server: LocalServer, *more: str) -> list[str]:
    return ["--set", f"redis.url={server.url}", "--set", "streams.keys=orders,payments", *more]


@pytest.mark.parametrize("target", ["app:events", "orders", DLQ["orders"], "a-hash"])
def test_audit_stream_naming_a_key_not_its_own_is_refused(redis_server: LocalServer,
                                                          target: str) -> None:
    """``--audit-stream`` naming an application stream with a consumer group (its consumers
    would get audit records, and ``MAXLEN ~ 100000`` trims its entries), a selected source,
    a dead-letter stream, or a hash: refused before anything listens (exit 2), the key
    untouched. Found: the console appended to any of them on the first action."""
    r = redis_server.client()
    seed(r, "orders", [{b"n": b"1"}, {b"n": b"2"}])
    ids = seed(r, "payments", [{b"p": b"1"}])
    for i in range(3):
        r.xadd("app:events", {"i": i})
    r.xgroup_create("app:events", "workers", "0")
    r.hset("a-hash", "f", "v")
    before = entries(r, target) if target != "a-hash" else None
    with console_process(_args(redis_server, "--audit-stream", target)) as console:
        if console.listening:  # the flaw: it serves; one export appends the audit record
            client, csrf = console.session()
            client.post("/act", data={"csrf_token": csrf, "key": DLQ["payments"],
                                      "ids": ids, "action": "export"})
        else:
            code, err = console.ended()
            assert code == 2, err
            assert "--audit-stream" in err and target in err
    if target == "a-hash":
        assert r.hgetall("a-hash") == {b"f": b"v"}
    else:
        assert entries(r, target) == before
    assert not console.listening, "it served with an audit stream that is not its own"


def test_an_audit_stream_of_its_own_is_taken_again(redis_server: LocalServer) -> None:
    """The check lets the console's own audit stream through on a restart."""
    r = redis_server.client()
    ids = seed(r, "orders", [{b"n": b"1"}])
    for _ in range(2):
        with console_process(_args(redis_server)) as console:
            assert console.listening, console.ended()
            client, csrf = console.session()
            client.post("/act", data={"csrf_token": csrf, "key": DLQ["orders"], "ids": ids,
                                      "action": "export"})
    assert [f[7] for _, f in entries(r, "recovery:console:audit")] == [b"export", b"export"]

