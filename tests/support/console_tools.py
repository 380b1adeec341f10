"""The console's tests' tools: letters seeded with the real move script, a console over a
real server (Starlette's TestClient, or uvicorn on a free port for the browser), logging in
the way a browser does (CSRF token from the form), and the state of Redis to compare."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import redis
from starlette.testclient import TestClient

from recovery.console.app import console_app
from recovery.console.serve import ServeOptions, console_state
from recovery.console.state import ConsoleState
from recovery.console.users import load_users
from recovery.params import RedisParams
from recovery.redis_io.redis_conn import connect
from recovery.settings.model import load_settings
from recovery.testing.backlog import create_group
from recovery.testing.local_redis import LocalServer, free_port
from tests.support.redrive_tools import dead_letter

OPERATOR, OPERATOR_SECRET = "olga", "operator-secret-1"
READER, READER_SECRET = "rita", "reader-secret-12"
USERS = {"RECOVERY_CONSOLE_USERS": f"{OPERATOR}:operator:{OPERATOR_SECRET};"
                                   f"{READER}:reader:{READER_SECRET}"}
SOURCES = ("orders", "payments")
GROUP = "billing"
DLQ = {"orders": "{orders}:dlq", "payments": "{payments}:dlq"}
CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')


def seed(client: redis.Redis, stream: str, payloads: list[dict[bytes, bytes]],
         reasons: list[str] | None = None, errors: list[str | None] | None = None
         ) -> list[str]:
    """Dead-letter `payloads` from `stream` / ``billing`` with the real move script. Returns
    their dead-letter IDs, in order."""
    if not client.exists(stream):
        create_group(client, stream, GROUP)
    before = client.xlen(DLQ[stream]) if client.exists(DLQ[stream]) else 0
    dead_letter(client, stream, GROUP, payloads,
                reasons or ["max-deliveries-exceeded"] * len(payloads), errors)
    entries = raw(client).execute_command("XRANGE", DLQ[stream], "-", "+")
    return [e[0].decode() for e in entries[before:]]


def raw(client: redis.Redis) -> redis.Redis:
    """A client with raw stream replies (field order and duplicates kept)."""
    kwargs = client.connection_pool.connection_kwargs
    return connect(RedisParams(f"redis://{kwargs['host']}:{kwargs['port']}",
                               password=kwargs.get("password")))


def state_for(server: LocalServer, rate: float | None = None) -> ConsoleState:
    settings = load_settings(None, [f"redis.url={server.url}",
                                    f"streams.keys={','.join(SOURCES)}"])
    return console_state(settings, load_users(USERS), ServeOptions(rate=rate))


def csrf_of(html: str) -> str:
    found = CSRF.search(html)
    assert found, "the page has no CSRF token"
    return found.group(1)


def logged_in(state: ConsoleState, user: str, secret: str) -> tuple[TestClient, str]:
    """A TestClient logged in as `user`, and its session's CSRF token (from the overview)."""
    client = TestClient(console_app(state), follow_redirects=False)
    form = client.get("/login")
    reply = client.post("/login", data={"csrf_token": csrf_of(form.text), "user": user,
                                        "secret": secret})
    assert reply.status_code == 303, reply.text
    return client, csrf_of(client.get("/").text)


def wait_task(client: TestClient, location: str, timeout_s: float = 20) -> str:
    """Reload a task's page until it says it finished; its last HTML."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        page = client.get(location).text
        if 'data-done="1"' in page:
            return page
        time.sleep(0.05)
    raise AssertionError(f"task {location} did not finish in {timeout_s} s")


def entries(client: redis.Redis, key: str) -> list[tuple[str, list[bytes]]]:
    """Every entry of `key` as (ID, flat fields), raw."""
    return [(e[0].decode(), list(e[1]))
            for e in raw(client).execute_command("XRANGE", key, "-", "+")]


@dataclass
class LiveConsole:
    url: str
    state: ConsoleState


@contextmanager
def live_console(state: ConsoleState) -> Iterator[LiveConsole]:
    """The console served by uvicorn on a free loopback port, in a thread."""
    import uvicorn

    port = free_port()
    config = uvicorn.Config(console_app(state), host="127.0.0.1", port=port,
                            log_level="warning")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.02)
    assert server.started, "uvicorn did not start"
    try:
        yield LiveConsole(f"http://127.0.0.1:{port}", state)
    finally:
        server.should_exit = True
        thread.join(10)
