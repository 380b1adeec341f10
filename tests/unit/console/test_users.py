"""The dead-letter console's Redis users of docs/ACL.md (``console-read``,
``console-operator``), read from the document and applied to real Redis 7.0 and 6.2 servers:
the console serves every page as the read-only user and every action (redrive, delete,
export, the audit log) as the operator, Redis holding what each did, and the ACL LOG shows
no refusal (but redis-py's CLIENT SETINFO, as for the job's users); what a rule leaves out
is refused by Redis itself."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
import redis
from redis import Redis

from recovery.console.serve import ServeOptions, console_state
from recovery.console.state import ConsoleState
from recovery.console.users import load_users
from recovery.settings.model import load_settings
from recovery.testing.backlog import create_group
from recovery.testing.local_redis import LocalServer
from tests.support.acl_rules import PASSWORD, create_users, refusals, setinfo_refusal
from tests.support.console_tools import (
    GROUP,
    OPERATOR,
    OPERATOR_SECRET,
    READER,
    READER_SECRET,
    USERS,
    csrf_of,
    entries,
    logged_in,
    wait_task,
)
from tests.support.redrive_tools import dead_letter

SOURCES = ("events:orders", "events:{eu}:pay")
DLQ = {"events:orders": "{events:orders}:dlq", "events:{eu}:pay": "events:{eu}:pay:dlq"}
AUDIT = "recovery:console:audit"


def seed(client: Redis) -> dict[str, list[str]]:
    """Three letters per source (the real move script); dead-letter stream -> their IDs."""
    for source in SOURCES:
        create_group(client, source, GROUP)
        dead_letter(client, source, GROUP, [{b"n": str(i).encode()} for i in range(3)],
                    ["max-deliveries-exceeded"] * 3)
    return {DLQ[s]: [i.decode() for i, _ in client.xrange(DLQ[s])] for s in SOURCES}


def console_as(server: LocalServer, user: str) -> ConsoleState:
    """A console over `server` as Redis user `user` (the documented password)."""
    settings = load_settings(None, [f"redis.url={server.url}", f"redis.username={user}",
                                    f"redis.password={PASSWORD}", "streams.match=events:*"])
    return console_state(settings, load_users(USERS), ServeOptions())


@pytest.fixture
def seeded(redis_version_server: LocalServer) -> Iterator[tuple[Redis, dict[str, list[str]]]]:
    client = redis_version_server.client()
    letters = seed(client)
    create_users(client)
    yield client, letters


def wait_counts(state: ConsoleState, key: str, timeout_s: float = 20) -> None:
    """Until the overview's background count of `key` finished (its reads are in the LOG)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = state.scans.latest(key)
        if found is not None and found.finished_s is not None:
            return
        time.sleep(0.05)
    raise AssertionError(f"the count of {key} did not finish in {timeout_s} s")


def test_the_read_only_user_serves_every_page(redis_version_server: LocalServer,
                                              seeded: tuple[Redis, dict[str, list[str]]]
                                              ) -> None:
    client, letters = seeded
    state = console_as(redis_version_server, "console-read")
    try:
        browser, _ = logged_in(state, READER, READER_SECRET)
        overview = browser.get("/")
        assert overview.status_code == 200 and all(k in overview.text for k in DLQ.values())
        for key, ids in letters.items():
            wait_counts(state, key)
            for order in ("newest", "oldest"):
                page = browser.get("/browse", params={"key": key, "order": order})
                assert page.status_code == 200 and all(i in page.text for i in ids)
            one = browser.get("/letter", params={"key": key, "id": ids[0]})
            assert one.status_code == 200 and "x-original-stream" in one.text
        link = browser.get("/streams/events:orders")
        assert link.status_code == 303 and browser.get(link.headers["location"]).status_code \
            == 200
        assert browser.get("/audit").status_code == 200
        assert browser.get("/").status_code == 200  # with the counts
    finally:
        state.close()
    assert refusals(client) <= {setinfo_refusal(client, "console-read")}, refusals(client)
    assert {k: [i for i, _ in entries(client, k)] for k in DLQ.values()} == letters


def test_the_operator_user_redrives_deletes_exports_and_audits(
        redis_version_server: LocalServer, seeded: tuple[Redis, dict[str, list[str]]]) -> None:
    client, letters = seeded
    key = DLQ["events:orders"]
    ids = letters[key]
    state = console_as(redis_version_server, "console-operator")
    try:
        browser, csrf = logged_in(state, OPERATOR, OPERATOR_SECRET)
        wait_counts(state, key)
        redrive = browser.post("/act", data={"csrf_token": csrf, "key": key, "ids": ids[:1],
                                             "action": "redrive"})
        assert redrive.status_code == 303, redrive.text
        assert "1 of 1 letters done: 1 moved back" in wait_task(browser,
                                                                redrive.headers["location"])
        ask = browser.post("/act", data={"csrf_token": csrf, "key": key, "ids": ids[1:2],
                                         "action": "delete"})
        done = browser.post("/delete", data={"csrf_token": csrf_of(ask.text), "key": key,
                                             "ids": ids[1:2], "confirm": "yes"})
        assert "1 of 1 selected letters deleted" in done.text
        export = browser.post("/act", data={"csrf_token": csrf, "key": key, "ids": ids[2:],
                                            "action": "export"})
        assert export.status_code == 200 and ids[2] in export.text
        assert browser.get("/audit").status_code == 200
    finally:
        state.close()
    assert refusals(client) <= {setinfo_refusal(client, "console-operator")}, refusals(client)
    assert [i for i, _ in entries(client, key)] == ids[2:]
    assert [f for _, f in entries(client, "events:orders")][-1] == [b"n", b"0",
                                                                   b"x-redrive-count", b"1"]
    actions = [dict(zip(f[::2], f[1::2], strict=True))[b"action"]
               for _, f in entries(client, AUDIT)]
    assert {b"delete", b"export"} <= set(actions) and any(b"redrive" in a for a in actions)


@pytest.mark.parametrize(("user", "command"), [
    ("console-read", ("XDEL", "{events:orders}:dlq", "0-1")),
    ("console-read", ("XADD", AUDIT, "*", "who", "x")),
    ("console-read", ("XTRIM", "{events:orders}:dlq", "MAXLEN", "0")),
    ("console-operator", ("DEL", "events:orders")),
    ("console-operator", ("XTRIM", "{events:orders}:dlq", "MAXLEN", "0")),
    ("console-operator", ("XADD", "other", "*", "a", "b")),
    ("console-operator", ("XGROUP", "DESTROY", "events:orders", GROUP)),
])
def test_what_the_rules_leave_out_redis_refuses(redis_version_server: LocalServer,
                                                seeded: tuple[Redis, dict[str, list[str]]],
                                                user: str, command: tuple[str, ...]) -> None:
    client, _ = seeded
    before = {k: client.xlen(k) for k in (*SOURCES, *DLQ.values())}
    as_user = redis.Redis(host="127.0.0.1", port=redis_version_server.port, username=user,
                          password=PASSWORD)
    with pytest.raises(redis.exceptions.NoPermissionError):
        as_user.execute_command(*command)
    as_user.close()
    assert refusals(client) - {setinfo_refusal(client, user)}, "no refusal in the ACL LOG"
    assert {k: client.xlen(k) for k in before} == before and not client.exists("other")
    assert client.xinfo_groups("events:orders")
