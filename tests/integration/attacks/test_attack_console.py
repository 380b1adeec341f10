"""Attacks on the dead-letter console (issue 65) through the command a user runs: the
console as a process (``python -m recovery console``), HTTP with httpx, real Redis checked
afterwards (sources, dead-letter streams, the audit stream), not what the pages say."""

from __future__ import annotations

import os
import re
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import redis

from recovery.console.users import hashed_secret
from recovery.testing.local_redis import LocalServer
from tests.support.console_process import CSRF, console_process
from tests.support.console_tools import DLQ, entries, seed


def _args(server: LocalServer, *more: str) -> list[str]:
    return ["--set", f"redis.url={server.url}", "--set", "streams.keys=orders,payments", *more]


@pytest.mark.slow
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


@pytest.mark.slow
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


def _letter(r: redis.Redis, key: str, entry_id: str, source: str | None) -> None:
    """An entry of `key`: a letter of `source` (its metadata block), or no letter (None)."""
    block = {} if source is None else {"x-original-stream": source,
                                       "x-original-group": "billing",
                                       "x-death-reason": "max-deliveries-exceeded"}
    r.xadd(key, {"body": entry_id, **block}, id=entry_id)


@pytest.mark.slow
def test_delete_leaves_what_is_not_a_letter_of_a_selected_source(
        redis_server: LocalServer) -> None:
    """A shared dead-letter stream (``dead_letter.stream = all-dlq``) holding a letter of a
    source the console does not select, and an entry without the metadata block: a confirmed
    delete of all three removes only the selected source's letter, as retention and the
    redrive refuse the others. Found: the delete XDELed all three."""
    r = redis_server.client()
    r.xgroup_create("orders", "billing", "0", mkstream=True)
    _letter(r, "all-dlq", "1-1", "orders")
    _letter(r, "all-dlq", "1-2", "payments")
    _letter(r, "all-dlq", "1-3", None)
    args = ["--set", f"redis.url={redis_server.url}", "--set", "streams.keys=orders",
            "--set", "dead_letter.stream=all-dlq"]
    with console_process(args) as console:
        client, csrf = console.session()
        page = client.post("/delete", data={"csrf_token": csrf, "key": "all-dlq",
                                            "ids": ["1-1", "1-2", "1-3"], "confirm": "yes"})
    assert page.status_code == 200, page.text
    assert [i for i, _ in entries(r, "all-dlq")] == ["1-2", "1-3"]
    assert "1 of 3 selected letters deleted" in page.text and "2 refused" in page.text
    audit = dict(zip(*[iter(entries(r, "recovery:console:audit")[-1][1])] * 2, strict=True))
    assert (audit[b"action"], audit[b"count"]) == (b"delete", b"1")


def _login_seconds(url: str, user: str) -> float:
    """How long one failed login of `user` takes, measured as a client sees it (s)."""
    client = httpx.Client(base_url=url, timeout=60)
    found = CSRF.search(client.get("/login").text)
    assert found
    started = time.perf_counter()
    reply = client.post("/login", data={"csrf_token": found.group(1), "user": user,
                                        "secret": "a-wrong-guess-123"})
    taken = time.perf_counter() - started
    assert reply.status_code == 401, reply.text
    return taken


@pytest.mark.slow
def test_login_time_does_not_tell_which_names_exist(redis_server: LocalServer,
                                                    tmp_path: Path) -> None:
    """With a secret stored hashed (PBKDF2, as the docs advise), a failed login of an
    existing name took 0.4-0.6 s and one of an unknown name 0.01-0.02 s, so the login form
    listed the users to anyone who asked. Each attempt now costs about the same."""
    users = tmp_path / "users"
    users.write_text(f"alice:operator:{hashed_secret('alice-secret-123')}\n")
    with console_process(_args(redis_server), {"RECOVERY_CONSOLE_USERS_FILE": str(users)}
                         ) as console:
        assert console.listening, console.ended()
        # Rounds over the three names, so a busy moment of the machine slows each name
        # alike; each name's fastest attempt. The flaw was a 20-60x gap: a quarter leaves
        # room for a loaded machine (a half failed once beside other tests).
        names = ("alice", "nobody", "operator")
        rounds = [{name: _login_seconds(console.url, name) for name in names}
                  for _ in range(5)]
        times = {name: min(one[name] for one in rounds) for name in names}
    assert times["nobody"] > times["alice"] / 4, times
    assert times["operator"] > times["alice"] / 4, times  # the plain token's user too


def _sent_bytes(r: redis.Redis) -> int:
    """Bytes the server has sent to all its clients (INFO stats)."""
    return int(r.info("stats")["total_net_output_bytes"])


@pytest.mark.slow
def test_huge_letters_never_make_a_reply_of_gigabytes(redis_server: LocalServer) -> None:
    """Eight letters of 16 MB each: a page of letters, the overview's count scan and a
    preview each read them in pieces of about 8 MB plus one letter, not all at once (one
    browse page read 8 x 64 MB in one XREVRANGE: 12 s, the console's memory up 900 MB, the
    server's peak memory up 900 MB for the reply's output buffer). Paging on still shows
    every letter once."""
    r = redis_server.client()
    r.xgroup_create("orders", "billing", "0", mkstream=True)
    body = b"x" * (16 * 1024 * 1024)
    ids = []
    for i in range(8):
        ids += [r.xadd(DLQ["orders"], {"body": body, "n": str(i), "x-original-stream": "orders",
                               "x-original-group": "billing",
                               "x-death-reason": "max-deliveries-exceeded"}).decode()]
    seeded_peak = int(r.info("memory")["used_memory_peak"])
    with console_process(_args(redis_server)) as console:
        client, _ = console.session()  # the overview starts the count scan
        deadline = time.monotonic() + 60
        while "Scanned 8 letters" not in client.get("/").text:
            assert time.monotonic() < deadline, "the count scan did not finish"
            time.sleep(0.5)
        seen: list[str] = []
        after = ""
        for _ in range(10):
            before = _sent_bytes(r)
            page = client.get("/browse", params={"key": DLQ["orders"], "after": after,
                                                 "order": "oldest"})
            assert _sent_bytes(r) - before < 30 * 1024 * 1024  # one letter and change
            seen += re.findall(r'name="ids" value="([^"]+)"', page.text)
            cursor = re.search(r"after=([0-9]+-[0-9]+)", page.text)
            if cursor is None:
                break
            after = cursor.group(1)
    assert seen == ids
    # 128 MB of letters; one reply of all of them would add as much again
    grown = int(r.info("memory")["used_memory_peak"]) - seeded_peak
    assert grown < 64 * 1024 * 1024, grown


def _peak_mb(pid: int) -> int:
    """The peak resident memory of process `pid` (VmHWM, MB)."""
    with open(f"/proc/{pid}/status") as status:
        line = next(x for x in status if x.startswith("VmHWM"))
    return int(line.split()[1]) // 1024


@pytest.mark.slow
def test_a_huge_form_is_refused_before_it_is_read(redis_server: LocalServer) -> None:
    """Any logged-in user (a reader too: the form is read before the role and the CSRF
    token are checked) could send 10,000 fields of 1 MB each, all read into the console's
    memory (300 MB sent: its peak memory up 300 MB, then a 403). A body over 2 MB is now
    refused with 413, by its Content-Length or, chunked, as it arrives."""
    env = {"RECOVERY_CONSOLE_READ_TOKEN": "reader-token-for-attacks"}
    with console_process(_args(redis_server), env) as console:
        client, csrf = console.session("reader", "reader-token-for-attacks")
        before = _peak_mb(console.process.pid)

        def chunks() -> Iterator[bytes]:
            for i in range(100):
                yield b"f%d=%s&" % (i, b"a" * 1_000_000)

        chunked = client.post("/recount", content=chunks(),
                              headers={"content-type": "application/x-www-form-urlencoded"})
        declared = client.post("/act", data={"csrf_token": csrf, "key": "x" * 3_000_000})
        ids = [f"{i}-0" for i in range(10_000)]  # the most a form may select still fits
        most = client.post("/act", data={"csrf_token": csrf, "key": DLQ["orders"],
                                         "ids": ids, "action": "export"})
        grown = _peak_mb(console.process.pid) - before
    assert (chunked.status_code, declared.status_code, most.status_code) == (413, 413, 403)
    assert grown < 50, f"the console's memory grew by {grown} MB"


@pytest.mark.slow
def test_a_letter_naming_its_dead_letter_stream_as_source_stays(
        redis_server: LocalServer) -> None:
    """``streams.match = *`` with one dead-letter stream for all (``dead_letter.stream =
    all-dlq``), that stream empty when the console starts: it is selected as a source of
    itself. A letter naming ``all-dlq`` as its source was then "redriven" into ``all-dlq``:
    its metadata block stripped, the letter gone, the audit saying 1 moved. Now refused."""
    r = redis_server.client()
    r.xgroup_create("orders", "billing", "0", mkstream=True)
    r.xadd("all-dlq", {"a": "b"}, id="1-1")
    r.xdel("all-dlq", "1-1")  # an empty stream: no letter says what it is
    args = ["--set", f"redis.url={redis_server.url}", "--set", "streams.match=*",
            "--set", "dead_letter.stream=all-dlq"]
    with console_process(args) as console:
        client, csrf = console.session()
        _letter(r, "all-dlq", "2-1", "all-dlq")
        before = entries(r, "all-dlq")
        task = client.post("/act", data={"csrf_token": csrf, "key": "all-dlq", "ids": ["2-1"],
                                         "action": "redrive"})
        assert task.status_code == 303, task.text
        deadline = time.monotonic() + 20
        while 'data-done="1"' not in (page := client.get(task.headers["location"]).text):
            assert time.monotonic() < deadline
            time.sleep(0.1)
    assert entries(r, "all-dlq") == before
    assert "1 refused" in page, page


@pytest.mark.slow
def test_a_console_killed_mid_redrive_leaves_each_letter_once_and_says_which(
        redis_server: LocalServer) -> None:
    """SIGKILL of the console while a redrive of six letters runs (at 2 letters/s): each
    letter is in its source or still in the dead-letter stream, exactly once, and the audit
    log, which has only the start, names the six letters to look for (it named none)."""
    r = redis_server.client()
    ids = seed(r, "orders", [{b"n": str(i).encode()} for i in range(6)])
    source_before = r.xlen("orders")
    with console_process(_args(redis_server, "--rate", "2")) as console:
        client, csrf = console.session()
        client.post("/act", data={"csrf_token": csrf, "key": DLQ["orders"], "ids": ids,
                                  "action": "redrive"})
        deadline = time.monotonic() + 20
        while r.xlen("orders") - source_before < 2:
            assert time.monotonic() < deadline, "nothing moved"
            time.sleep(0.05)
        os.killpg(console.process.pid, signal.SIGKILL)
        console.process.wait(10)
    left = [i for i, _ in entries(r, DLQ["orders"])]
    moved = r.xlen("orders") - source_before
    assert 2 <= moved < 6 and moved + len(left) == 6 and set(left) <= set(ids)
    audit = [dict(zip(f[::2], f[1::2], strict=True)) for _, f in
             entries(r, "recovery:console:audit")]
    assert [a[b"action"] for a in audit] == [b"redrive-start"]
    assert all(i.encode() in audit[0][b"detail"] for i in ids), audit[0][b"detail"]


def test_an_id_past_64_bits_is_a_bad_request_not_a_redis_error(
        redis_server: LocalServer) -> None:
    """``99999999999999999999-0`` matched the console's ID pattern, so Redis refused it: an
    export or a browse cursor answered 503 "Redis error", a redrive stopped on
    ``ResponseError`` and logged redrive-failed. Each is now a 400 naming the parameter,
    and nothing reaches Redis or the audit log."""
    r = redis_server.client()
    seed(r, "orders", [{b"n": b"1"}])
    huge = "99999999999999999999-0"
    with console_process(_args(redis_server)) as console:
        client, csrf = console.session()
        answers = [client.post("/act", data={"csrf_token": csrf, "key": DLQ["orders"],
                                             "ids": [huge], "action": what}).status_code
                   for what in ("export", "redrive", "delete")]
        answers.append(client.get("/browse", params={"key": DLQ["orders"],
                                                     "after": huge}).status_code)
        answers.append(client.get("/letter", params={"key": DLQ["orders"],
                                                     "id": huge}).status_code)
    assert answers == [400] * 5
    assert not r.exists("recovery:console:audit")


def _export_lines(client: httpx.Client, csrf: str, ids: list[str]) -> int:
    """Lines an export of `ids` (of the orders' dead-letter stream) streams back."""
    with client.stream("POST", "/act", data={"csrf_token": csrf, "key": DLQ["orders"],
                                             "ids": ids, "action": "export"}) as reply:
        return sum(1 for _ in reply.iter_lines())


@pytest.mark.slow
def test_an_export_of_huge_letters_holds_one_at_a_time(redis_server: LocalServer) -> None:
    """An export of twelve letters of 16 MB read all of them (one pipelined XRANGE each)
    before the first line went out, and held them while it wrote: exporting all twelve
    after one grew the console's peak memory by 190 MB more. It now reads and writes one
    letter at a time (twelve cost about what two or three do); every line still comes out, the audit
    records it, and the letters stay."""
    r = redis_server.client()
    r.xgroup_create("orders", "billing", "0", mkstream=True)
    ids = [r.xadd(DLQ["orders"], {"body": chr(97 + i) * (16 * 1024 * 1024),
                                  "x-original-stream": "orders"}).decode() for i in range(12)]
    with console_process(_args(redis_server)) as console:
        client, csrf = console.session()
        assert _export_lines(client, csrf, ids[:1]) == 1
        one = _peak_mb(console.process.pid)
        assert _export_lines(client, csrf, ids) == 12
        more = _peak_mb(console.process.pid) - one
    assert r.xlen(DLQ["orders"]) == 12
    audit = dict(zip(*[iter(entries(r, "recovery:console:audit")[-1][1])] * 2, strict=True))
    assert (audit[b"action"], audit[b"count"]) == (b"export", b"12")
    # a letter or two in flight while the previous one is sent, never the 192 MB selection
    assert more < 120, f"twelve letters of 16 MB took {more} MB more than one"


@pytest.mark.slow
def test_a_lost_reply_to_a_redrive_is_not_reported_as_already_gone(
        redis_server: LocalServer) -> None:
    """The server runs the redrive script, its reply is lost and the connection closed
    (``ReplyDropper``): the letter is back in its source, once. redis-py sent the script
    again, which found the letter gone, so the task and the audit said "0 moved, 1 already
    gone". The console's tasks now send each command once, and a move whose connection
    failed counts as "unknown", named on the task's page and in the audit."""
    from recovery.redis_io.scripts import scripts_for
    from tests.support.lost_reply import ReplyDropper

    r = redis_server.client()
    ids = seed(r, "orders", [{b"n": b"1"}])
    source_before = r.xlen("orders")
    sha = scripts_for(r)["redrive"].sha.encode()
    r.script_load(scripts_for(r)["redrive"].script)  # its first EVALSHA runs it
    dropper = ReplyDropper(redis_server.port, sha)
    args = ["--set", f"redis.url={dropper.url()}", "--set", "streams.keys=orders"]
    try:
        with console_process(args) as console:
            client, csrf = console.session()
            task = client.post("/act", data={"csrf_token": csrf, "key": DLQ["orders"],
                                             "ids": ids, "action": "redrive"})
            deadline = time.monotonic() + 30
            while 'data-done="1"' not in (page := client.get(task.headers["location"]).text):
                assert time.monotonic() < deadline
                time.sleep(0.1)
    finally:
        dropper.close()
    assert dropper.dropped == 1  # the fault happened: the script ran, its reply was lost
    assert r.xlen("orders") == source_before + 1 and not r.xlen(DLQ["orders"])
    audit = dict(zip(*[iter(entries(r, "recovery:console:audit")[-1][1])] * 2, strict=True))
    assert audit[b"count"] == b"1" or b"unknown" in audit[b"detail"], (audit, page)


def test_a_lost_reply_to_a_delete_is_not_reported_as_nothing_deleted(
        redis_server: LocalServer) -> None:
    """XDEL ran, its reply was lost: redis-py sent it again, which deleted nothing more, and
    the page and the audit said 0 of 2 deleted. Now the page is an error and the audit
    says the delete failed and the letters may be gone."""
    from tests.support.lost_reply import ReplyDropper

    r = redis_server.client()
    ids = seed(r, "orders", [{b"n": b"1"}, {b"n": b"2"}])
    dropper = ReplyDropper(redis_server.port, b"XDEL")
    args = ["--set", f"redis.url={dropper.url()}", "--set", "streams.keys=orders"]
    try:
        with console_process(args) as console:
            client, csrf = console.session()
            page = client.post("/delete", data={"csrf_token": csrf, "key": DLQ["orders"],
                                                "ids": ids, "confirm": "yes"})
    finally:
        dropper.close()
    assert dropper.dropped == 1 and not r.xlen(DLQ["orders"])
    assert page.status_code == 503, page.text
    audit = dict(zip(*[iter(entries(r, "recovery:console:audit")[-1][1])] * 2, strict=True))
    assert audit[b"action"] == b"delete-failed"
