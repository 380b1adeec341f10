"""The dead-letter console's HTTP rules against a real Redis, through Starlette's TestClient
(recovery.console.app, recovery.console.guard, recovery.console.pages, recovery.console.act,
recovery.console.sessions, recovery.console.users, recovery.console.queries,
recovery.console.state, recovery.console.serve, recovery.cli.console): logged out, the
reader role, a POST without its CSRF token, a hostile field value, a binary value, two
redrives of one letter at once (recovery.console.tasks; the move: test_moves.py), delete,
export and the audit log (recovery.console.audit), and the Redis password nowhere; filters
(recovery.report.signature_rules; pages by ID: test_browse.py), the overview and its
background counts (recovery.console.overview, recovery.console.counts). Each test checks
Redis itself."""

from __future__ import annotations

import json
import threading

import pytest
import redis

from recovery.console.state import ConsoleState
from recovery.console.users import hashed_secret, load_users
from recovery.errors import ConfigError
from recovery.settings.model import load_settings
from recovery.testing.local_redis import LocalServer, server_binary
from tests.support.console_tools import (
    DLQ,
    OPERATOR,
    OPERATOR_SECRET,
    READER,
    READER_SECRET,
    csrf_of,
    entries,
    logged_in,
    seed,
    state_for,
    wait_task,
)

HOSTILE = b"<script>alert('x')</script>"


def letters(client: redis.Redis, n: int = 5, stream: str = "orders") -> list[str]:
    return seed(client, stream, [{b"n": str(i).encode(), b"body": b"x" * i} for i in range(n)])


def test_logged_out_sees_only_the_login(state: ConsoleState,
                                        redis_server: LocalServer) -> None:
    from starlette.testclient import TestClient

    from recovery.console.app import console_app

    ids = letters(redis_server.client(), 2)
    client = TestClient(console_app(state), follow_redirects=False)
    for path in ("/", f"/browse?key={DLQ['orders']}", f"/letter?key={DLQ['orders']}&id={ids[0]}",
                 "/audit", "/task?id=1"):
        reply = client.get(path)
        assert (reply.status_code, reply.headers["location"]) == (303, "/login"), path
    reply = client.post("/act", data={"key": DLQ["orders"], "ids": ids[0], "action": "redrive"})
    assert reply.status_code == 401
    assert client.get("/static/console.css").status_code == 200
    wrong = client.post("/login", data={"csrf_token": csrf_of(client.get("/login").text),
                                        "user": OPERATOR, "secret": "not-the-secret"})
    assert wrong.status_code == 401 and "rsr_console=" not in wrong.headers.get("set-cookie", "")
    no_token = TestClient(console_app(state), follow_redirects=False)
    reply = no_token.post("/login", data={"user": OPERATOR, "secret": OPERATOR_SECRET})
    assert reply.status_code == 403
    assert [i for i, _ in entries(redis_server.client(), DLQ["orders"])] == ids


def test_session_cookie_is_locked_down(state: ConsoleState) -> None:
    client, _ = logged_in(state, READER, READER_SECRET)
    from starlette.testclient import TestClient

    from recovery.console.app import console_app

    fresh = TestClient(console_app(state), follow_redirects=False)
    form = fresh.get("/login")
    reply = fresh.post("/login", data={"csrf_token": csrf_of(form.text), "user": READER,
                                       "secret": READER_SECRET})
    cookie = reply.headers["set-cookie"].lower()
    assert "httponly" in cookie and "samesite=strict" in cookie and "path=/" in cookie
    assert READER_SECRET.lower() not in cookie
    page = client.get("/")
    assert "frame-ancestors 'none'" in page.headers["content-security-policy"]
    assert page.headers["cache-control"] == "no-store"
    client.cookies.set("rsr_console", client.cookies["rsr_console"][:-2] + "00")
    assert client.get("/").status_code == 303  # a forged signature is no session


def test_reader_sees_but_cannot_act(state: ConsoleState, redis_server: LocalServer) -> None:
    ids = letters(redis_server.client(), 3)
    client, csrf = logged_in(state, READER, READER_SECRET)
    browse = client.get(f"/browse?key={DLQ['orders']}")
    assert browse.status_code == 200 and ids[0] in browse.text
    assert 'name="ids"' not in browse.text  # no selection boxes for a reader
    assert client.get(f"/letter?key={DLQ['orders']}&id={ids[0]}").status_code == 200
    for action in ("redrive", "delete", "export"):
        reply = client.post("/act", data={"csrf_token": csrf, "key": DLQ["orders"],
                                          "ids": ids, "action": action})
        assert reply.status_code == 403, action
    assert client.post("/delete", data={"csrf_token": csrf, "key": DLQ["orders"], "ids": ids,
                                        "confirm": "yes"}).status_code == 403
    assert [i for i, _ in entries(redis_server.client(), DLQ["orders"])] == ids
    assert redis_server.client().xlen("orders") == 3  # nothing added to the source


def test_post_without_csrf_token_is_refused(state: ConsoleState,
                                            redis_server: LocalServer) -> None:
    ids = letters(redis_server.client(), 2)
    client, csrf = logged_in(state, OPERATOR, OPERATOR_SECRET)
    for data in ({}, {"csrf_token": "forged"}, {"csrf_token": csrf[:-1]}):
        for path in ("/act", "/delete"):
            reply = client.post(path, data={**data, "key": DLQ["orders"], "ids": ids,
                                            "action": "redrive", "confirm": "yes"})
            assert reply.status_code == 403, (path, data)
    assert [i for i, _ in entries(redis_server.client(), DLQ["orders"])] == ids
    assert redis_server.client().xlen("orders") == 2


def test_hostile_field_value_shows_as_text(state: ConsoleState,
                                           redis_server: LocalServer) -> None:
    [letter] = seed(redis_server.client(), "orders", [{HOSTILE: HOSTILE}],
                    errors=["boom <script>alert(2)</script>"])
    client, _ = logged_in(state, READER, READER_SECRET)
    for path in (f"/browse?key={DLQ['orders']}", f"/letter?key={DLQ['orders']}&id={letter}",
                 f"/browse?key={DLQ['orders']}&group=%3Cscript%3Ealert(3)%3C/script%3E"):
        page = client.get(path).text
        assert "<script" not in page, path
    page = client.get(f"/letter?key={DLQ['orders']}&id={letter}").text
    assert "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;" in page
    assert "boom &lt;script&gt;alert(2)&lt;/script&gt;" in page


def test_binary_and_long_values(state: ConsoleState, redis_server: LocalServer) -> None:
    long_value = "é".encode() * 3000  # 6000 bytes of valid UTF-8
    [letter] = seed(redis_server.client(), "orders",
                    [{b"bin": b"\xff\x00\x01\xfe", b"long": long_value}])
    client, _ = logged_in(state, READER, READER_SECRET)
    page = client.get(f"/letter?key={DLQ['orders']}&id={letter}").text
    assert "<i>hex</i> ff 00 01 fe" in page
    assert "cut: 6000 bytes in all" in page and "é" * 1024 in page and "é" * 1025 not in page
    assert 'id="metadata"' in page and "x-original-stream" in page and "max-deliveries" in page


def test_redrive_selected_puts_fields_back_byte_for_byte(state: ConsoleState,
                                                         redis_server: LocalServer) -> None:
    r = redis_server.client()
    payloads = [{b"n": str(i).encode(), b"raw": bytes([i, 255, 0]), b"dup": b"a"}
                for i in range(6)]
    ids = seed(r, "orders", payloads)
    before = dict(entries(r, DLQ["orders"]))
    source_before = r.xlen("orders")
    client, csrf = logged_in(state, OPERATOR, OPERATOR_SECRET)
    chosen = [ids[1], ids[3], ids[4]]
    reply = client.post("/act", data={"csrf_token": csrf, "key": DLQ["orders"], "ids": chosen,
                                      "action": "redrive"})
    assert reply.status_code == 303
    page = wait_task(client, reply.headers["location"])
    assert "3 moved back" in page
    assert sorted(i for i, _ in entries(r, DLQ["orders"])) == sorted(
        set(ids) - set(chosen))
    added = [flat for _, flat in entries(r, "orders")][source_before:]
    originals = [before[i][:before[i].index(b"x-original-stream")] for i in chosen]
    assert originals[0] == [b"n", b"1", b"raw", bytes([1, 255, 0]), b"dup", b"a"]
    assert added == [[*o, b"x-redrive-count", b"1"] for o in originals]
    audit = client.get("/audit").text
    assert OPERATOR in audit and "redrive" in audit


def test_two_redrives_of_one_letter_move_it_once(redis_server: LocalServer) -> None:
    r = redis_server.client()
    ids = letters(r, 4)
    source_before = r.xlen("orders")
    first, second = state_for(redis_server), state_for(redis_server)
    try:
        clients = [logged_in(first, OPERATOR, OPERATOR_SECRET),
                   logged_in(second, OPERATOR, OPERATOR_SECRET)]
        go = threading.Barrier(2)
        locations: list[str] = []

        def click(client_csrf: tuple[object, str]) -> None:
            client, csrf = client_csrf
            go.wait()
            reply = client.post("/act", data={  # type: ignore[attr-defined]
                "csrf_token": csrf, "key": DLQ["orders"], "ids": [ids[2]], "action": "redrive"})
            locations.append(reply.headers["location"])

        threads = [threading.Thread(target=click, args=(c,)) for c in clients]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        pages = [wait_task(c, loc) for (c, _), loc in zip(clients, locations, strict=True)]
    finally:
        first.close()
        second.close()
    assert sorted("1 moved back" in p for p in pages) == [False, True]
    assert sum("1 already gone" in p for p in pages) == 1
    assert r.xlen("orders") == source_before + 1  # one copy, not two
    assert [i for i, _ in entries(r, DLQ["orders"])] == [ids[0], ids[1], ids[3]]


def test_delete_needs_confirmation_and_is_audited(state: ConsoleState,
                                                  redis_server: LocalServer) -> None:
    r = redis_server.client()
    ids = letters(r, 4)
    client, csrf = logged_in(state, OPERATOR, OPERATOR_SECRET)
    ask = client.post("/act", data={"csrf_token": csrf, "key": DLQ["orders"],
                                    "ids": ids[:2], "action": "delete"})
    assert ask.status_code == 200 and 'id="confirm"' in ask.text
    assert r.xlen(DLQ["orders"]) == 4  # asking deletes nothing
    unconfirmed = client.post("/delete", data={"csrf_token": csrf, "key": DLQ["orders"],
                                               "ids": ids[:2]})
    assert unconfirmed.status_code == 400 and r.xlen(DLQ["orders"]) == 4
    done = client.post("/delete", data={"csrf_token": csrf_of(ask.text), "key": DLQ["orders"],
                                        "ids": ids[:2], "confirm": "yes"})
    assert "2 of 2 selected letters deleted" in done.text
    assert [i for i, _ in entries(r, DLQ["orders"])] == ids[2:]
    [audit_id, *_] = entries(r, "recovery:console:audit")[::-1]
    fields = dict(zip(audit_id[1][::2], audit_id[1][1::2], strict=True))
    assert (fields[b"who"], fields[b"action"], fields[b"count"]) == (b"olga", b"delete", b"2")


def test_export_is_json_lines(state: ConsoleState, redis_server: LocalServer) -> None:
    ids = seed(redis_server.client(), "orders", [{b"a": b"1"}, {b"b": b"\xff"}])
    client, csrf = logged_in(state, OPERATOR, OPERATOR_SECRET)
    reply = client.post("/act", data={"csrf_token": csrf, "key": DLQ["orders"], "ids": ids,
                                      "action": "export"})
    lines = [json.loads(line) for line in reply.text.splitlines()]
    assert [(x["id"], x["fields"]) for x in lines] == [(ids[0], [["a", "1"]]),
                                                       (ids[1], [["b", {"hex": "ff"}]])]
    assert lines[0]["metadata"]["x-original-stream"] == "orders"
    assert redis_server.client().xlen(DLQ["orders"]) == 2  # export leaves them


def test_filter_preview_then_redrive_what_matches(state: ConsoleState,
                                                  redis_server: LocalServer) -> None:
    r = redis_server.client()
    ids = seed(r, "orders", [{b"n": str(i).encode()} for i in range(6)],
               reasons=["max-deliveries-exceeded", "handler-failed-at-limit"] * 3)
    client, csrf = logged_in(state, OPERATOR, OPERATOR_SECRET)
    page = client.get(f"/browse?key={DLQ['orders']}&reason=handler-failed-at-limit&order=oldest")
    assert [i for i in ids if f'id="letter-{i}"' in page.text] == ids[1::2]
    reply = client.post("/preview", data={"csrf_token": csrf, "key": DLQ["orders"],
                                          "reason": "handler-failed-at-limit"})
    shown = wait_task(client, reply.headers["location"])
    assert "3 letters match" in shown and r.xlen(DLQ["orders"]) == 6
    preview_id = reply.headers["location"].split("=")[1]
    go = client.post("/redrive-matching", data={"csrf_token": csrf, "preview": preview_id})
    assert "3 moved back" in wait_task(client, go.headers["location"])
    assert [i for i, _ in entries(r, DLQ["orders"])] == ids[0::2]


def test_a_key_outside_the_selection_is_never_read(state: ConsoleState,
                                                   redis_server: LocalServer) -> None:
    r = redis_server.client()
    r.xadd("other:dlq", {"secret": "x"})
    client, csrf = logged_in(state, OPERATOR, OPERATOR_SECRET)
    assert client.get("/browse?key=other:dlq").status_code == 404
    [other] = [i for i, _ in entries(r, "other:dlq")]
    assert client.post("/delete", data={"csrf_token": csrf, "key": "other:dlq", "ids": other,
                                        "confirm": "yes"}).status_code == 404
    assert r.xlen("other:dlq") == 1
    assert client.get(f"/browse?key={DLQ['orders']}&since_ms=tomorrow").status_code == 400


def test_overview_counts_say_how_fresh_they_are(state: ConsoleState,
                                                redis_server: LocalServer) -> None:
    seed(redis_server.client(), "orders", [{b"n": b"1"}] * 3,
         reasons=["max-deliveries-exceeded"] * 3, errors=["timeout after 31 ms"] * 3)
    client, _ = logged_in(state, READER, READER_SECRET)
    client.get("/")  # starts the count scan
    for _ in range(200):
        page = client.get("/").text
        if "Scanned 3 letters, finished" in page:
            break
    assert "Scanned 3 letters, finished" in page
    assert "timeout after &lt;n&gt; ms" in page
    assert 'id="groups"' in page and "billing" in page


def test_the_redis_password_appears_nowhere() -> None:
    binary = server_binary("redis")
    assert binary is not None
    password = "pw-Zq81-never-shown"
    server = LocalServer(binary, args=("--requirepass", password),
                         client_options={"password": password}).start()
    try:
        seed(server.client(), "orders", [{b"n": b"1"}])
        from recovery.console.serve import ServeOptions, console_state
        from recovery.console.users import load_users
        from recovery.settings.model import load_settings
        from tests.support.console_tools import USERS

        url = server.url.replace("redis://", f"redis://:{password}@")
        settings = load_settings(None, [f"redis.url={url}", "streams.keys=orders"])
        state = console_state(settings, load_users(USERS), ServeOptions())
        client, _ = logged_in(state, OPERATOR, OPERATOR_SECRET)
        [letter] = [i for i, _ in entries(server.client(), DLQ["orders"])]
        texts = [client.get(p).text for p in (
            "/", f"/browse?key={DLQ['orders']}", f"/letter?key={DLQ['orders']}&id={letter}",
            "/audit", "/browse?key=nope", "/task?id=99")]
        server.stop()  # Redis gone: the error page names host and port only
        texts.append(client.get("/").text)
        assert "cannot reach Redis at 127.0.0.1" in texts[-1]
        assert all(password not in t for t in texts)
        state.close()
    finally:
        server.stop()


def test_users_come_from_the_environment_never_empty(tmp_path: object) -> None:
    with pytest.raises(ConfigError, match="no console user"):
        load_users({})
    with pytest.raises(ConfigError, match="shorter than"):
        load_users({"RECOVERY_CONSOLE_TOKEN": "short"})
    with pytest.raises(ConfigError, match="role reader or operator"):
        load_users({"RECOVERY_CONSOLE_USERS": "ann:admin:long-enough-secret"})
    users = load_users({"RECOVERY_CONSOLE_USERS": f"ann:operator:{hashed_secret('s' * 12, 1000)}",
                        "RECOVERY_CONSOLE_READ_TOKEN": "reader-token-123"})
    assert users["ann"].accepts("s" * 12) and not users["ann"].accepts("s" * 11)
    assert users["reader"].accepts("reader-token-123")
    assert "reader-token" not in repr(users)


def test_signature_text_is_the_views_signature() -> None:
    from recovery.report.signature_rules import signature_text

    assert signature_text("timeout after 3012 ms on order 88") == \
        "timeout after <n> ms on order <n>"
    assert signature_text("bad 'X12' id 1700000000000-3 at 0x1f  ok") == \
        "bad <str> id <id> at <hex> ok"
    assert signature_text(None) is None


def test_console_command_refuses_what_it_cannot_honour(monkeypatch: pytest.MonkeyPatch,
                                                        redis_server: LocalServer,
                                                        capsys: pytest.CaptureFixture[str]
                                                        ) -> None:
    from recovery.cli.console import console_main

    for variable in ("RECOVERY_CONSOLE_USERS", "RECOVERY_CONSOLE_USERS_FILE",
                     "RECOVERY_CONSOLE_TOKEN", "RECOVERY_CONSOLE_READ_TOKEN"):
        monkeypatch.delenv(variable, raising=False)
    url = f"--set=redis.url={redis_server.url}"
    assert console_main([url, "--set=streams.keys=orders", "--port", "0"]) == 2
    assert console_main([url, "--set=streams.keys=orders", "--tls-cert", "x.pem"]) == 2
    assert console_main([url, "--set=streams.keys=orders"]) == 2
    assert "no console user" in capsys.readouterr().err
    monkeypatch.setenv("RECOVERY_CONSOLE_TOKEN", "a-long-enough-token")
    assert console_main(["--set=redis.url=redis://127.0.0.1:1/0",
                         "--set=streams.keys=orders"]) == 1
    assert "cannot reach Redis at 127.0.0.1:1" in capsys.readouterr().err


def test_the_benchmark_runs_at_a_small_size(tmp_path: object) -> None:
    """tests/benchmark/console.py end to end on 3,000 letters, so it cannot rot (its timings
    are printed, never asserted)."""
    from pathlib import Path

    from tests.benchmark.console import main

    out = Path(str(tmp_path)) / "console.json"
    assert main(["--letters", "3000", "--repeats", "1", "--json", str(out)]) == 0
    figures = json.loads(out.read_text())
    assert figures["letters"] == 3000 and figures["background count of the whole stream (s)"]
    assert len(figures["page 100 filtered by reason"]) == 2


def test_logout_ends_the_session_and_guessing_gets_slow(state: ConsoleState) -> None:
    client, csrf = logged_in(state, READER, READER_SECRET)
    kept = client.cookies["rsr_console"]
    assert client.post("/logout", data={"csrf_token": csrf}).status_code == 303
    client.cookies.set("rsr_console", kept)  # a copy of the cookie kept from before
    assert client.get("/").status_code == 303
    from starlette.testclient import TestClient

    from recovery.console.app import console_app

    guesser = TestClient(console_app(state), follow_redirects=False)
    token = csrf_of(guesser.get("/login").text)
    codes = [guesser.post("/login", data={"csrf_token": token, "user": OPERATOR,
                                          "secret": f"guess-number-{i}"}).status_code
             for i in range(6)]
    assert codes == [401] * 5 + [429]
    right = guesser.post("/login", data={"csrf_token": token, "user": OPERATOR,
                                         "secret": OPERATOR_SECRET})
    assert right.status_code == 429  # even the right secret, until the window passes


def test_a_letter_goes_back_only_to_a_selected_source(state: ConsoleState,
                                                      redis_server: LocalServer) -> None:
    r = redis_server.client()
    [real] = letters(r, 1)
    stray = r.xadd(DLQ["orders"], {"n": "1", "x-original-stream": "elsewhere",
                                   "x-original-id": "1-0", "x-death-reason": "handler-rejected"})
    bare = r.xadd(DLQ["orders"], {"no": "metadata"})
    client, csrf = logged_in(state, OPERATOR, OPERATOR_SECRET)
    reply = client.post("/act", data={"csrf_token": csrf, "key": DLQ["orders"],
                                      "ids": [stray.decode(), bare.decode(), real],
                                      "action": "redrive"})
    page = wait_task(client, reply.headers["location"])
    assert "1 moved back" in page and "2 refused" in page
    assert "not a stream the config selects" in page and "no x-original-stream" in page
    assert not r.exists("elsewhere")
    assert [i for i, _ in entries(r, DLQ["orders"])] == [stray.decode(), bare.decode()]


@pytest.mark.slow
def test_the_console_on_a_redis_cluster(redis_cluster: object) -> None:
    """Sources on all three primaries: the overview lists every dead-letter stream, and a
    redrive runs each letter's script on the primary that owns its source's slot."""
    from recovery.console.serve import ServeOptions, console_state
    from recovery.redis_io.dlq_names import dead_letter_key
    from recovery.testing.backlog import create_group
    from tests.support.cluster_fixtures import LocalCluster, keys_on_every_primary
    from tests.support.console_tools import USERS
    from tests.support.redrive_tools import dead_letter

    assert isinstance(redis_cluster, LocalCluster)
    redis_cluster.wait_healthy()
    redis_cluster.flush()
    rc = redis_cluster.client()
    sources = keys_on_every_primary(rc, 1, prefix="cs")
    for stream in sources:
        create_group(rc, stream, "billing")
        dead_letter(rc, stream, "billing", [{b"n": b"1", b"\xff": b""}, {b"n": b"2"}],
                    ["max-deliveries-exceeded"] * 2)
    settings = load_settings(None, [f"redis.url={redis_cluster.url}",
                                    f"streams.keys={','.join(sources)}"])
    state = console_state(settings, load_users(USERS), ServeOptions())
    try:
        client, csrf = logged_in(state, OPERATOR, OPERATOR_SECRET)
        home = client.get("/").text
        assert all(dead_letter_key(s, ":dlq") in home for s in sources)
        for stream in sources:
            key = dead_letter_key(stream, ":dlq")
            first = rc.xrange(key)[0][0].decode()
            reply = client.post("/act", data={"csrf_token": csrf, "key": key, "ids": first,
                                              "action": "redrive"})
            assert "1 moved back" in wait_task(client, reply.headers["location"])
            assert rc.xlen(key) == 1
            assert [f for _, f in rc.xrange(stream)][2:] == [
                {b"n": b"1", b"\xff": b"", b"x-redrive-count": b"1"}]
    finally:
        state.close()
        rc.close()


def test_overview_page_and_redrive_on_every_server(server: LocalServer) -> None:
    """Redis 7.0, Valkey 8.1 and Redis 6.2 (no lag in XINFO GROUPS there): the same pages and
    the same move."""
    r = server.client()
    ids = letters(r, 3)
    r.xadd("orders", {"n": "late"})
    r.xreadgroup("billing", "c", {"orders": ">"})  # one entry pending: its idle time shows
    found = state_for(server)
    try:
        client, csrf = logged_in(found, OPERATOR, OPERATOR_SECRET)
        home = client.get("/")
        assert home.status_code == 200 and 'id="groups"' in home.text
        groups = home.text.split('id="groups"')[1]
        assert "<td>orders</td><td>billing</td><td class=\"n\">1</td>" in groups
        assert all(i in client.get(f"/browse?key={DLQ['orders']}").text for i in ids)
        reply = client.post("/act", data={"csrf_token": csrf, "key": DLQ["orders"],
                                          "ids": ids[0], "action": "redrive"})
        assert "1 moved back" in wait_task(client, reply.headers["location"])
    finally:
        found.close()
    assert [i for i, _ in entries(r, DLQ["orders"])] == ids[1:]
    assert entries(r, "orders")[-1][1] == [b"n", b"0", b"body", b"", b"x-redrive-count", b"1"]


@pytest.mark.slow
def test_the_command_serves_on_loopback_and_stops_cleanly(redis_server: LocalServer) -> None:
    """``python -m recovery console`` (the installed command's code) as a process: it listens on
    127.0.0.1 by default, asks for a login, and exits 0 on Ctrl-C."""
    import os
    import signal
    import socket
    import subprocess
    import sys
    import time

    import httpx

    from recovery.testing.local_redis import free_port

    port = free_port()
    env = {**os.environ, "RECOVERY_CONSOLE_TOKEN": "a-long-enough-token"}
    process = subprocess.Popen([sys.executable, "-m", "recovery", "console", "--port", str(port),
                                "--set", f"redis.url={redis_server.url}",
                                "--set", "streams.keys=orders"],
                               env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                reply = httpx.get(f"http://127.0.0.1:{port}/", timeout=2)
                break
            except httpx.TransportError:
                time.sleep(0.2)
        assert (reply.status_code, reply.headers["location"]) == (303, "/login")
        with socket.socket() as probe:  # not on another address of the machine
            outside = socket.gethostbyname(socket.gethostname())
            assert outside.startswith("127.") or probe.connect_ex((outside, port)) != 0
    finally:
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=30)
    assert process.returncode == 0, err
    assert f"console: http://127.0.0.1:{port}/" in err and "a-long-enough-token" not in out + err


def test_a_redrive_that_stops_on_an_error_says_so_in_the_audit_log(
        state: ConsoleState, redis_server: LocalServer) -> None:
    r = redis_server.client()
    ids = letters(r, 3)
    r.delete("orders")
    r.set("orders", "now a string")  # the source became another type: the script refuses
    client, csrf = logged_in(state, OPERATOR, OPERATOR_SECRET)
    reply = client.post("/act", data={"csrf_token": csrf, "key": DLQ["orders"], "ids": ids,
                                      "action": "redrive"})
    page = wait_task(client, reply.headers["location"])
    assert "Stopped:" in page and "WRONGTYPE" in page
    assert [i for i, _ in entries(r, DLQ["orders"])] == ids and r.get("orders") == b"now a string"
    newest_first = [dict(zip(f[::2], f[1::2], strict=True))
                    for _, f in entries(r, "recovery:console:audit")][::-1]
    assert newest_first[0][b"action"] == b"redrive-failed"
    assert newest_first[1][b"action"] == b"redrive-start"
