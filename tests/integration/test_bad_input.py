"""Bad input: config, Redis and data. Each case gets one ``error:`` line that names the
problem and the fix, with the documented exit code (2 bad config or arguments, 1 anything
else); nothing pending is lost, and the other streams are still processed.

The job runs in-process (``recovery.jobs.recover.RecoverJob`` on the suite's session); a config
error must fail before a SparkSession is even asked for. Where the cases meet the package: a
run without the handler it needs (recovery.driver.handler_choice), the server check and the
keys skipped or matching nothing (recovery.targets.keys), and an error an executor raised,
brought back through Spark as the job's own one line (recovery.spark.errors).
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import pytest
from redis import Redis

from recovery.executor.handover.lease import LEASE_FRESH_S
from recovery.jobs.dead_letters import DeadLettersJob
from recovery.testing.backlog import add_entries, create_group, deliver, make_stuck
from recovery.testing.local_redis import LocalServer, free_port
from tests.support.backlogs import DEAD, HOUR_MS, binary_fields
from tests.support.fault_tools import (
    GROUP,
    ROOT,
    JobResult,
    Key,
    dead_letter_index,
    handed_over,
    job_args,
    report_rows,
    rows_by_key,
    run_in_process,
    seed_kinds,
    write_control,
)
from tests.support.handlers import CHECKSUM, FIRST_CALL_ENTRIES, checksum
from tests.support.invariants import final_states, pel
from tests.support.lost_reply import ReplyDropper
from tests.support.redrive_tools import dead_letter
from tests.support.servers import (
    OLDEST,
    OLDEST_VERSION,
    ON_ONE_SERVER,
    ON_REDIS_VERSIONS,
    start_server,
)


def assert_one_error_line(result: JobResult, code: int, *fragments: str) -> str:
    """Exit `code`, exactly one ``error:`` line on stderr containing `fragments`, and the
    JSON summary as the last stdout line."""
    assert result.code == code, (result.code, result.stderr)
    lines = result.error_lines()
    assert len(lines) == 1, result.stderr
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    assert result.summary["exit_code"] == code
    assert result.summary["status"] in ("error", "failed")
    return lines[0]


# --- config: exit 2 before Spark or Redis -------------------------------------------------

FIX = "fix it in the --config file, the RECOVERY_<SECTION>__<FIELD> variable or --set"


@pytest.mark.parametrize(("overrides", "fragments"), [
    (["claim.bogus=1"], ["claim.bogus: unknown setting", "conf/recovery.toml"]),
    (["bogus.field=1"], ["bogus: unknown setting"]),
    (["claim.count=abc"], ["claim.count: Input should be a valid integer", FIX]),
    (["claim.min_idle_ms=0"], ["claim.min_idle_ms: Input should be greater than or equal to 1"]),
    (["claim.min_idle_ms=-5"], ["claim.min_idle_ms: Input should be greater than or equal"]),
    (["claim.count=0"], ["claim.count: Input should be greater than or equal to 1"]),
    (["claim.count=20000"], ["claim.count: Input should be less than or equal to 10000"]),
    (["claim.max_deliveries=0"], ["claim.max_deliveries: Input should be greater than or"]),
    (["claim.max_entries_per_s=0"], ["claim.max_entries_per_s: Input should be greater than 0"]),
    (["dead_letter.batch_size=0"], ["dead_letter.batch_size: Input should be greater than"]),
    (["handler.batch_size=-1"], ["handler.batch_size: Input should be greater than or"]),
    (["handler.timeout_s=0"], ["handler.timeout_s: Input should be greater than 0"]),
    (["spark.partitions=0"], ["spark.partitions: Input should be greater than or equal to 1"]),
    (["handler.timeout_s=60"], ["handler.timeout_s (60 s) must be shorter than "
                                "claim.min_idle_ms (60000 ms)", "lower the timeout"]),
    (["streams.keys="], ["select streams: set streams.keys and/or streams.match", FIX]),
    (["handler.path=nope"], ["handler.path: 'nope' is not a handler path",
                             "package.module:function"]),
    (["redis.url=http://x"], ["redis.url must look like redis://host:port/db"]),
    (["redis.url=not a url"], ["redis.url must look like redis://host:port/db"]),
    (["redis.url=redis://h:abc/0"], ["redis.url has a port that is not a number from 1"]),
    (["redis.url=redis://h:70000/0"], ["redis.url has a port that is not a number from 1"]),
    (["redis.url=redis://h:6379/zero"], ["redis.url names database 'zero'", "must be a number"]),
    (["claim.count"], ["--set 'claim.count': write it as section.field=value"]),
    (["claim.backoff_factor=0.5"], ["claim.backoff_factor: 0.5 is not a backoff factor",
                                    "e.g. 2", FIX]),
    (["claim.backoff_factor=inf"], ["claim.backoff_factor: inf is not a backoff factor"]),
    (["claim.backoff_max_ms=1000"], ["claim: backoff_max_ms (1000) is below min_idle_ms "
                                     "(60000)", "raise backoff_max_ms or leave it unset"]),
], ids=lambda v: v[0] if isinstance(v, list) else None)
def test_bad_setting_exits_2_naming_field_and_fix(overrides, fragments, tmp_path):
    argv = ["--set", "streams.keys=orders", "--set", f"report.path={tmp_path}"]
    argv += [a for o in overrides for a in ("--set", o)]
    assert_one_error_line(run_in_process(None, argv), 2, "error: ", *fragments)


@pytest.mark.parametrize(("toml", "fragments"), [
    ('[streams]\nkeys = ["o"]\n[bogus]\nx = 1\n', ["bogus: unknown setting"]),
    ('[streams]\nkeys = "o"\n', ["streams.keys: Input should be a valid list"]),
    ('[streams]\nkeys = ["o"]\n[claim]\nmin_idle_ms = "soon"\n', ["claim.min_idle_ms"]),
    ('[streams]\nkeys = ["o"\n', ["recovery.toml is not valid TOML (Unclosed array",
                                  "fix its syntax"]),
], ids=["unknown-section", "wrong-type-list", "wrong-type-int", "syntax"])
def test_bad_config_file_exits_2(toml, fragments, tmp_path):
    conf = tmp_path / "recovery.toml"
    conf.write_text(toml)
    result = run_in_process(None, ["--config", str(conf)])
    assert_one_error_line(result, 2, *fragments)


def test_bad_environment_variable_and_missing_file_and_unknown_option(tmp_path, monkeypatch):
    monkeypatch.setenv("RECOVERY_CLAIM__COUNT", "many")
    result = run_in_process(None, ["--set", "streams.keys=o"])
    assert_one_error_line(result, 2, "claim.count: Input should be a valid integer", FIX)
    monkeypatch.delenv("RECOVERY_CLAIM__COUNT")
    result = run_in_process(None, ["--config", str(tmp_path / "nope.toml")])
    assert_one_error_line(result, 2, "does not exist: pass an existing --config")
    result = run_in_process(None, ["--bogus"])
    assert_one_error_line(result, 2, "unrecognized arguments: --bogus", "(see --help)")


@pytest.mark.parametrize(("path", "fragments"), [
    ("no_such_module:handle", ["handler.path 'no_such_module:handle'", "does not import",
                               "install it on driver and executors or fix the path"]),
    ("tests.support.handlers:NOT_CALLABLE", ["'NOT_CALLABLE' is not a callable",
                                     "name a function as package.module:function"]),
    ("tests.support.handlers:no_such_function", ["'no_such_function' is not a callable"]),
])
def test_handler_that_does_not_import_or_call_exits_2(path, fragments, tmp_path):
    """Checked before Redis is contacted (the URL here leads nowhere) and before Spark."""
    argv = job_args(f"redis://127.0.0.1:{free_port()}/0", tmp_path, ["o"], f"handler.path={path}")
    assert_one_error_line(run_in_process(None, argv), 2, *fragments)


@pytest.mark.slow
def test_report_location_not_writable_exits_2(spark, redis_server, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    client = redis_server.client()
    seed_kinds(client, ["o"], {"ok": (3, 1)})
    before = pel(client, "o", GROUP)
    result = run_in_process(spark, job_args(redis_server.url, blocker / "reports", ["o"]))
    assert_one_error_line(result, 2, f"report.path {blocker}/reports",
                          "is not a writable directory", "point report.path at a directory")
    assert pel(client, "o", GROUP) == before, "nothing was claimed"


# --- Redis: exit 1, one line, nothing pending lost -----------------------------------------

def test_unreachable_redis_exits_1(spark, tmp_path):
    port = free_port()
    result = run_in_process(spark, job_args(f"redis://127.0.0.1:{port}/0", tmp_path, ["o"]))
    assert_one_error_line(result, 1, f"cannot reach Redis at 127.0.0.1:{port}",
                          "Connection refused", "check redis.url, that the server runs")
    assert result.seconds < 10, result.seconds


@pytest.fixture
def http_port() -> Iterator[int]:
    """Something that is not Redis: answers every connection with an HTTP error."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    stop = threading.Event()

    def serve() -> None:
        sock.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = sock.accept()
            except OSError:
                continue
            with conn:
                conn.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield sock.getsockname()[1]
    stop.set()
    thread.join(2)
    sock.close()


@pytest.mark.slow
def test_url_that_is_not_redis_exits_1(spark, tmp_path, http_port):
    result = run_in_process(spark, job_args(f"redis://127.0.0.1:{http_port}/0", tmp_path, ["o"]))
    line = assert_one_error_line(result, 1, f"127.0.0.1:{http_port}")
    assert "points at a Redis server" in line or "cannot reach Redis" in line, line


@pytest.fixture
def password_server() -> Iterator[LocalServer]:
    srv = start_server("redis", "--requirepass", "s3cret-pw")
    yield srv
    srv.stop()


@pytest.mark.slow
@pytest.mark.parametrize("password", ["wrong", None])
def test_wrong_or_missing_password_exits_1(spark, password_server, tmp_path, password):
    extra = [f"redis.password={password}"] if password else []
    result = run_in_process(spark, job_args(password_server.url, tmp_path, ["o"], *extra))
    line = assert_one_error_line(result, 1, f"Redis at 127.0.0.1:{password_server.port} "
                                 "refused the login", "check redis.username and the password")
    assert "s3cret" not in result.stderr + str(result.summary)
    assert password is None or password not in line


def _acl_user(client: Redis, name: str, *rules: str) -> list[str]:
    client.execute_command("ACL", "SETUSER", name, "on", ">pw", "~*", "&*", "+@all", *rules)
    return [f"redis.username={name}", "redis.password=pw"]


@pytest.mark.slow
def test_user_without_xautoclaim_gets_the_command_named_and_nothing_moves(
        spark, redis_version_server, tmp_path):
    client = redis_version_server.client()
    seeded = seed_kinds(client, ["p-a", "p-b"])
    before = {s: pel(client, s, GROUP) for s in ("p-a", "p-b")}
    login = _acl_user(client, "limited", "-xautoclaim")
    result = run_in_process(spark, job_args(redis_version_server.url, tmp_path, ["p-a", "p-b"],
                                            *login))
    assert_one_error_line(result, 1, "the Redis user 'limited' may not run XAUTOCLAIM",
                          "ACL SETUSER limited +xautoclaim")
    assert {s: pel(client, s, GROUP) for s in ("p-a", "p-b")} == before
    assert not dead_letter_index(client, ["p-a", "p-b"]) and not handed_over(client)
    assert len(seeded) == 2 * 57


@pytest.mark.slow
def test_user_without_evalsha_fails_after_claiming_and_a_rerun_finishes(
        spark, redis_version_server, tmp_path):
    """The claims succeed, the first dead-letter move is refused: everything the run claimed
    stays pending on its consumer, and a run with the right user finishes the work."""
    client = redis_version_server.client()
    streams = ["q-a", "q-b"]
    seeded = seed_kinds(client, streams)
    write_control(redis_version_server.url)
    login = _acl_user(client, "noscripts", "-evalsha", "-eval")
    result = run_in_process(spark, job_args(redis_version_server.url, tmp_path, streams,
                                            "claim.min_idle_ms=1000", *login))
    assert_one_error_line(result, 1, "the Redis user 'noscripts' may not run EVALSHA")
    live = {k: v for k, v in seeded.items() if v != "deleted"}
    assert all(s.startswith("pending:recovery-") for s in final_states(client, live).values())
    assert not dead_letter_index(client, streams)
    pels = {stream: pel(client, stream, GROUP) for stream in streams}
    counts = {key: pels[key[0]][key[2]].delivery_count for key in live}
    time.sleep(1.1)
    rerun = run_in_process(spark, job_args(redis_version_server.url, tmp_path, streams,
                                           "claim.min_idle_ms=1000", run_id="fixed"))
    assert rerun.code == 0, rerun.stderr
    states = final_states(client, live)
    letters = dead_letter_index(client, streams)
    for key, kind in live.items():
        # A retried attempt of the failed run may still claim after it returned: the dead
        # letter's own count then says how often the entry was delivered in the end.
        final = int(letters[key][1][b"x-delivery-count"]) if key in letters else counts[key] + 1
        want = after_rerun(kind, max(final, counts[key] + 1))
        assert states[key].startswith(want), (key, kind, counts[key], states[key])


def after_rerun(kind: str, deliveries: int) -> str:
    """The state a run with max_deliveries 5 leaves an entry of `kind` in, claimed to
    `deliveries`. (The failed run's task is retried; an attempt that starts once its
    entries are idle again, past claim.min_idle_ms, claims them once more: a slow machine
    adds deliveries, which Redis counts.)"""
    if deliveries > 5 or (kind == "fail" and deliveries == 5):
        return "dead_lettered"
    return {"ok": "acked", "fail": "pending:recovery-fixed-"}.get(kind, "dead_lettered")


@pytest.mark.slow
def test_other_type_key_and_missing_group_are_skipped_and_the_rest_processed(
        spark, server, tmp_path):
    client = server.client()
    seeded = seed_kinds(client, ["t-ok"], {"ok": (5, 1)})
    client.set("t-string", "not a stream")
    seed_kinds(client, ["t-other-group"], {"ok": (3, 1)}, group="someone-else")
    write_control(server.url)
    result = run_in_process(spark, job_args(
        server.url, tmp_path, ["t-ok", "t-string", "t-missing", "t-other-group"],
        f"streams.groups={GROUP}"))
    assert result.code == 0, result.stderr
    assert result.summary["status"] == "partial"
    skipped = {(s["stream"], s["group"]): s["reason"] for s in result.summary["skipped"]}
    assert skipped == {
        ("t-string", None): "not a stream (type string): left alone",
        ("t-missing", None): "no such key: fix streams.keys",
        ("t-other-group", GROUP): "no such consumer group: fix streams.groups",
    }
    assert set(final_states(client, seeded).values()) == {"acked"}
    assert len(pel(client, "t-other-group", "someone-else")) == 3, "left alone"


# --- the oldest server supported ---------------------------------------------------------

@pytest.mark.slow
def test_a_server_older_than_6_2_is_refused_in_one_line_and_6_2_itself_is_not(spark, tmp_path):
    """No server older than 6.2 can be started here (no package of one reaches this machine),
    so the refusal is shown on a real Redis 6.2.5 whose INFO reply a proxy rewrites to say
    6.0.9: the gate reads only INFO's ``redis_version``, and everything else is the real
    server. The same server unrewritten passes the gate and is recovered."""
    with start_server(OLDEST) as server:
        client = server.client()
        assert client.info("server")["redis_version"] == OLDEST_VERSION
        seeded = seed_kinds(client, ["old"], {"ok": (3, 1)})
        write_control(server.url)
        proxy = ReplyDropper(server.port, b"\0never", rewrite=(
            f"redis_version:{OLDEST_VERSION}".encode(), b"redis_version:6.0.9"))
        try:
            old = run_in_process(None, job_args(proxy.url(), tmp_path, ["old"]))
        finally:
            proxy.close()
        assert_one_error_line(old, 1, "Redis 6.0.9 has no XAUTOCLAIM",
                              "upgrade the server to Redis 6.2 or newer")
        assert [r["consumer"] for r in client.xpending_range("old", GROUP, "-", "+", 10)] \
            == [DEAD.encode()] * 3, "nothing claimed"
        current = run_in_process(spark, job_args(server.url, tmp_path, ["old"]))
        assert current.code == 0, current.stderr
        assert set(final_states(client, seeded).values()) == {"acked"}


# --- streams, groups and entries that vanish while the job runs ---------------------------

@pytest.mark.slow
@ON_REDIS_VERSIONS  # errors met in scripts: 6.2 wraps their code (Valkey keeps it, as 7.0)
def test_streams_groups_and_entries_vanishing_mid_run_cost_only_themselves(
        spark, server, tmp_path):
    """The handler's first call (after every claim, before most hand-overs) deletes one
    stream, destroys one group, replaces one stream by a string and XDELs the entries of a
    fourth. The run still succeeds, the untouched stream is fully processed, and every entry
    of the others is reported once. Nothing of a vanished stream or group is handed over
    afterwards; an XDELed entry whose content the job already holds may be (once), since
    the lease checks existence only when it renews (see docs/GUARANTEES.md). One task, and
    the first call outlasts the lease reading's freshness window: a vanish earlier than that
    before a call is always seen. Materialised (no claim journal): in one pass the first call
    would come before most claims, and a stream gone before its claim has nothing to report."""
    client = server.client()
    healthy, gone = ["v-ok"], ["v-del", "v-grp", "v-type", "v-xdel"]
    kinds = {"ok": (12, 1), "poison": (3, 9)}
    seeded = seed_kinds(client, healthy + gone, kinds)
    xdel_ids = [k[2] for k in seeded if k[0] == "v-xdel"]
    write_control(server.url, on_first_call=[
        ["DEL", "v-del"], ["XGROUP", "DESTROY", "v-grp", GROUP], ["DEL", "v-type"],
        ["SET", "v-type", "now a string"], ["XDEL", "v-xdel", *xdel_ids]],
        after_first_call_s=LEASE_FRESH_S + 0.05)
    result = run_in_process(spark, job_args(server.url, tmp_path, healthy + gone,
                                            "handler.batch_size=3", "spark.partitions=1",
                                            "claim.journal_prefix=", run_id="vanish"))
    assert result.code == 0, result.stderr

    ok = {k: v for k, v in seeded.items() if k[0] in healthy}
    assert final_states(client, ok) == {
        k: "acked" if v == "ok" else "dead_lettered" for k, v in ok.items()}
    rows = rows_by_key(report_rows(spark, tmp_path, "vanish"))
    handed = handed_over(client)
    first_call = {tuple(e.decode().split(" ")) for e in client.smembers(FIRST_CALL_ENTRIES)}
    letters = dead_letter_index(client, gone)
    for key in (k for k in seeded if k[0] in gone):
        (row,) = rows[key]
        if row["action"] == "dead_lettered":
            assert letters[key][0] == row["dead_letter_id"]
        elif row["action"] == "reprocessed":  # only an ack on a group that still exists
            assert key[0] == "v-xdel" and handed[key] == 1, (key, handed[key])
        elif row["action"] == "skipped":
            assert "vanished" in row["reason"] or "no longer pending" in row["reason"], row
        else:
            assert row["action"] == "deleted" and key[0] == "v-xdel", row
        assert handed[key] <= 1, key
        if key[0] != "v-xdel":
            assert handed[key] == 0 or key in first_call, f"{key} handled after it vanished"
    assert client.xlen("v-xdel") == 0 and not pel(client, "v-xdel", GROUP)


# --- data -----------------------------------------------------------------------------------

def _with_checksum(fields: dict[bytes, bytes]) -> dict[bytes, bytes]:
    return {**fields, CHECKSUM: checksum(list(fields.items()))}


DATA = {  # stream -> fields of its entries (one handled, one dead-lettered)
    "d-big": lambda i: _with_checksum({b"blob": hashlib.sha256(b"%d" % i).digest() * 327_680}),
    "d-wide": lambda i: _with_checksum({b"f%04d" % n: b"v%d" % (n * i) for n in range(500)}),
    "d-huge": lambda i: _with_checksum({b"f%05d" % n: b"v" for n in range(4100)}),
    "d-empty": lambda i: _with_checksum({b"": b"", b"e": b""}),
    "d-bin": lambda i: binary_fields(i, "ok"),
}


ODD_KEY = b"d-\xff\xfe-not-utf8"  # matches d-*, but is not UTF-8: skipped, left alone
ODD_NAMES = "d-names"  # a stream whose entries are stuck on ODD_OWNER, also in ODD_GROUP
ODD_OWNER = b"dead-\xfe"  # a consumer name that is not UTF-8: its entries recovered as any
ODD_GROUP = b"g-\xff"  # a group name that is not UTF-8: skipped, its entries left alone


def _seed_data(client: Redis) -> dict[Key, str]:
    seeded: dict[Key, str] = {}
    makers = {**DATA, ODD_NAMES: lambda i: binary_fields(i, "ok")}
    for stream, make in makers.items():
        owner = ODD_OWNER if stream == ODD_NAMES else DEAD
        create_group(client, stream, GROUP)
        ids = add_entries(client, stream, 2, make)  # type: ignore[arg-type]
        deliver(client, stream, GROUP, owner, 2)  # type: ignore[arg-type]
        make_stuck(client, stream, GROUP, owner, ids[:1], HOUR_MS, 1)  # type: ignore[arg-type]
        make_stuck(client, stream, GROUP, owner, ids[1:], HOUR_MS, 9)  # type: ignore[arg-type]
        seeded.update({(stream, GROUP, ids[0]): "ok", (stream, GROUP, ids[1]): "poison"})
    client.xgroup_create(ODD_NAMES, ODD_GROUP, id="0")
    client.xreadgroup(ODD_GROUP, DEAD, {ODD_NAMES: ">"})
    client.xadd(ODD_KEY, {"a": "1"})
    client.xgroup_create(ODD_KEY, GROUP, id="0")
    client.xreadgroup(GROUP, DEAD, {ODD_KEY: ">"})
    return seeded


@pytest.mark.slow
@ON_ONE_SERVER  # binary fields on every server: test_end_to_end's exactly-once recovery
def test_big_wide_empty_and_binary_entries_survive_byte_for_byte(spark, server, tmp_path):
    client = server.client()
    seeded = _seed_data(client)
    assert len(client.xrange("d-big")[0][1][b"blob"]) == 10 * 1024 * 1024
    write_control(server.url)
    result = run_in_process(spark, job_args(server.url, tmp_path, [], "streams.match=d-*",
                                            run_id="data"))
    assert result.code == 0, result.stderr
    assert result.summary["status"] == "partial"
    skipped = {(s["stream"], s["group"]): s["reason"] for s in result.summary["skipped"]}
    assert list(skipped) == [("d-\\xff\\xfe-not-utf8", None), (ODD_NAMES, "g-\\xff")], skipped
    assert all("not UTF-8" in reason for reason in skipped.values()), skipped
    assert len(pel(client, ODD_KEY, GROUP)) == 1, "left alone, still pending"
    assert len(pel(client, ODD_NAMES, ODD_GROUP)) == 2, "left alone, still pending"

    states = final_states(client, seeded)
    letters = dead_letter_index(client, sorted({k[0] for k in seeded}))
    rows = rows_by_key(report_rows(spark, tmp_path, "data"))
    for key in (k for k in seeded if k[0] == ODD_NAMES):
        assert rows[key][0]["previous_consumer"] == "dead-\\xfe"
    handed = handed_over(client)
    for key, kind in seeded.items():
        (row,) = rows[key]
        if kind == "ok":  # the handler verified the checksum, so the bytes arrived intact
            assert (states[key], row["action"], handed[key]) == ("acked", "reprocessed", 1)
        elif key[0] == "d-huge":  # too many fields for a server-side move: stays pending
            assert states[key].startswith("pending:recovery-data-"), states[key]
            assert row["action"] == "failed" and "too many fields" in row["reason"]
        else:
            assert states[key] == "dead_lettered", (key, states[key])
            fields = letters[key][1]
            original = [(k, v) for k, v in fields.items() if not k.startswith(b"x-")]
            assert fields[CHECKSUM] == checksum(original), f"{key}: bytes changed in the DLQ"


@pytest.mark.slow
def test_handler_that_raises_returns_garbage_or_hangs(spark, redis_server, tmp_path):
    """batch_size 1: every message is its own call. Failures stay pending (or go to the DLQ
    at the limit, with the error); a hang costs handler.timeout_s, not the hang."""
    client = redis_server.client()
    kinds = {"ok": (3, 1), "fail": (2, 1), "fail_at_limit": (1, 4)}
    seeded: dict[Key, str] = {}
    for behaviour in ("raise", "garbage", "hang"):  # a field on every entry of the stream
        seeded.update(seed_kinds(client, [f"h-{behaviour}"], kinds, flag=behaviour))
    seeded.update(seed_kinds(client, ["h-ok"], {"ok": (4, 1)}))
    write_control(redis_server.url, hang_s=120)
    streams = sorted({k[0] for k in seeded})
    result = run_in_process(spark, job_args(redis_server.url, tmp_path, streams,
                                            "handler.batch_size=1", "handler.timeout_s=1",
                                            run_id="misbehave"))
    assert result.code == 0, result.stderr
    assert result.seconds < 100, "a hang must cost the timeout, not the hang"
    states = final_states(client, seeded)
    letters = dead_letter_index(client, streams)
    rows = rows_by_key(report_rows(spark, tmp_path, "misbehave"))
    errors = {"raise": "ValueError: boom", "garbage": "handler returned garbage",
              "hang": "timed out after 1 s"}
    for key in seeded:
        behaviour = key[0][2:]
        (row,) = rows[key]
        if behaviour == "ok":
            assert states[key] == "acked"
        elif states[key] == "dead_lettered":
            assert errors[behaviour] in letters[key][1][b"x-exception-message"].decode()
        else:
            assert states[key].startswith("pending:recovery-misbehave-"), (key, states[key])
            assert row["action"] == "failed", row
            assert errors[behaviour] in row["error"] or (
                behaviour == "hang" and "not handed to the handler" in row["error"]), row
    assert {r["action"] for k, (r,) in rows.items() if k[0] == "h-hang"} <= {
        "failed", "dead_lettered"}
    assert any("timed out" in (r["error"] or "") for (r,) in rows.values())



# --- options a job does not act on, levels and values it does not know -------------------

JOBS = ("recover", "redrive", "dead_letters")


def run_job(job: str, *args: str) -> JobResult:
    """``python jobs/<job>.py`` as a user runs it (a refusal comes before Spark is needed)."""
    started = time.monotonic()
    proc = subprocess.run([sys.executable, f"jobs/{job}.py", *args], cwd=ROOT, text=True,
                          capture_output=True, timeout=120, env={**os.environ})
    summary = json.loads(proc.stdout.strip().splitlines()[-1]) if proc.stdout.strip() else {}
    return JobResult(proc.returncode, summary, proc.stderr,
                     time.monotonic() - started)


def _letters(client: Redis, stream: str, n: int, reason: str = "max-deliveries-exceeded"
             ) -> None:
    """`n` dead letters of `stream` (group ``g``), made with the real move script."""
    client.xgroup_create(stream, "g", id="$", mkstream=True)
    dead_letter(client, stream, "g", [{b"n": b"%d" % i} for i in range(n)], [reason] * n)


def _redis_state(client: Redis) -> dict[bytes, object]:
    """Every key with its stream entries (or its type): what a refused job must not change."""
    state: dict[bytes, object] = {}
    for key in sorted(client.keys("*")):
        kind = client.type(key)
        state[key] = client.xrange(key) if kind == b"stream" else kind
    return state


@pytest.mark.slow
@pytest.mark.parametrize("extra", [[], ["--dry-run"]], ids=["real", "dry-run"])
def test_redrive_refuses_plan_and_moves_nothing(redis_server, tmp_path, extra):
    """``--plan`` belongs to jobs/recover.py; the redrive cannot honour it and says so."""
    client = redis_server.client()
    _letters(client, "orders", 5)
    before = _redis_state(client)
    result = run_job("redrive", "--set", f"redis.url={redis_server.url}",
                     "--set", "streams.keys=orders", "--plan", str(tmp_path / "nope"), *extra)
    assert_one_error_line(result, 2, "unrecognized arguments: --plan", "(see --help)")
    assert _redis_state(client) == before
    assert client.xlen("{orders}:dlq") == 5


@pytest.mark.slow
def test_dead_letters_refuses_options_it_does_not_act_on(redis_server):
    result = run_job("dead_letters", "--set", f"redis.url={redis_server.url}",
                     "--set", "streams.keys=orders", "--plan", "/x")
    assert_one_error_line(result, 2, "unrecognized arguments: --plan")


@pytest.mark.slow
@pytest.mark.parametrize("job", JOBS)
def test_help_lists_only_the_options_the_job_acts_on(job):
    proc = subprocess.run([sys.executable, f"jobs/{job}.py", "--help"], cwd=ROOT, text=True,
                          capture_output=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    options = proc.stdout.partition("\noptions:")[2]  # after the description's prose
    assert options, proc.stdout
    assert ("--plan" in options) == (job == "recover"), proc.stdout
    assert "--dry-run" in options, proc.stdout


@pytest.mark.slow
@pytest.mark.parametrize("job", JOBS)
def test_unknown_log_level_exits_2_naming_the_levels(redis_server, job):
    client = redis_server.client()
    _letters(client, "orders", 3)
    before = _redis_state(client)
    result = run_job(job, "--set", f"redis.url={redis_server.url}", "--set",
                     "streams.keys=orders", "--log-level", "bogus")
    assert_one_error_line(result, 2, "argument --log-level: 'bogus' is not a log level",
                          "DEBUG, INFO, WARNING, ERROR")
    assert "Traceback" not in result.stderr
    assert _redis_state(client) == before


def test_handler_mode_without_handler_path_is_refused_and_nothing_claimed(redis_server,
                                                                          tmp_path):
    """No default handler: a handler-mode run that names none is refused before Redis is
    touched (the example handler would ack every entry)."""
    client = redis_server.client()
    seed_kinds(client, ["o"], {"ok": (4, 1)})
    before = _redis_state(client)
    pels = pel(client, "o", GROUP)
    argv = ["--set", f"redis.url={redis_server.url}", "--set", f"report.path={tmp_path}",
            "--set", "streams.keys=o"]
    result = run_in_process(None, argv)
    assert_one_error_line(result, 2, "handler.path is not set", "reprocess.mode = handler",
                          "package.module:function")
    assert pel(client, "o", GROUP) == pels and _redis_state(client) == before
    assert not list(tmp_path.iterdir()), "no report written"


@pytest.mark.slow
def test_without_handler_path_a_dry_run_and_a_requeue_run_need_none(spark, redis_server,
                                                                    tmp_path, caplog):
    """A dry run calls no handler (it plans, and says a real run needs one); requeue and
    reassign hand entries to Redis, not to a handler."""
    client = redis_server.client()
    seeded = seed_kinds(client, ["o"], {"ok": (4, 1)})
    argv = ["--set", f"redis.url={redis_server.url}", "--set", f"report.path={tmp_path}",
            "--set", "streams.keys=o", "--set", "claim.max_deliveries=5"]
    dry = run_in_process(spark, [*argv, "--dry-run"])
    assert dry.code == 0, dry.stderr
    assert dry.summary["totals"]["would_reprocess"] == 4
    assert [r.levelname for r in caplog.records
            if "a real run in handler mode needs handler.path" in r.getMessage()] == ["WARNING"]
    requeue = run_in_process(spark, [*argv, "--set", "reprocess.mode=requeue"])
    assert requeue.code == 0, requeue.stderr
    assert requeue.summary["totals"]["requeued"] == 4
    assert set(final_states(client, seeded).values()) == {"acked"}
    assert client.xlen("o") == 8, "the four originals and their four copies"


@pytest.mark.slow
def test_unknown_redrive_reason_exits_2_naming_the_reasons(redis_server):
    client = redis_server.client()
    _letters(client, "orders", 3)
    before = _redis_state(client)
    result = run_job("redrive", "--set", f"redis.url={redis_server.url}",
                     "--set", "streams.keys=orders",
                     "--set", "redrive.reasons=max-delivery-exceeded")
    assert_one_error_line(result, 2, "redrive.reasons", "'max-delivery-exceeded'",
                          "max-deliveries-exceeded, handler-failed-at-limit")
    assert _redis_state(client) == before


# --- selections that match nothing say so ------------------------------------------------

@pytest.mark.slow
def test_recover_selection_matching_no_key_warns(spark, redis_server, tmp_path, caplog):
    client = redis_server.client()
    seeded = seed_kinds(client, ["o"], {"ok": (3, 1)})
    write_control(redis_server.url)
    result = run_in_process(spark, job_args(redis_server.url, tmp_path, [],
                                            "streams.keys=", "streams.match=nomatch:*"))
    assert result.code == 0, result.stderr
    warning = "streams.match 'nomatch:*' matched no stream"
    assert [r.levelname for r in caplog.records if warning in r.getMessage()] == ["WARNING"]
    assert any(warning in w for w in result.summary["warnings"]), result.summary
    assert set(final_states(client, seeded).values()) == {f"pending:{DEAD}"}


@pytest.mark.slow
@pytest.mark.parametrize(("overrides", "warning"), [
    (["streams.match=nomatch:*"], "streams.match 'nomatch:*' matched no stream"),
    (["streams.keys=nosuch"], "nosuch: no dead-letter stream {nosuch}:dlq"),
    (["streams.keys=orders", "redrive.groups=nosuch"],
     "matched none of the 3 dead letters examined"),
], ids=["match", "keys", "filters"])
def test_redrive_that_matches_nothing_warns(redis_server, overrides, warning):
    client = redis_server.client()
    _letters(client, "orders", 3)
    before = _redis_state(client)
    args = [a for o in [f"redis.url={redis_server.url}", *overrides] for a in ("--set", o)]
    result = run_job("redrive", *args)
    assert result.code == 0, result.stderr
    assert result.summary["totals"]["matched"] == 0
    assert any("WARNING" in line and warning in line for line in result.stderr.splitlines()), \
        result.stderr
    assert any(warning in w for w in result.summary["warnings"]), result.summary
    assert _redis_state(client) == before


@pytest.mark.slow
def test_dead_letter_read_that_matches_nothing_warns(spark, redis_server, tmp_path, capsys,
                                                     caplog):
    _letters(redis_server.client(), "orders", 2)
    argv = [a for o in [f"redis.url={redis_server.url}", f"report.path={tmp_path}",
                        "streams.match=nomatch:*"] for a in ("--set", o)]
    assert DeadLettersJob(lambda _: spark).main(argv) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["totals"]["dead_letter_streams"] == 0
    warning = "streams.match 'nomatch:*' matched no stream with a dead-letter stream"
    assert any(warning in w for w in summary["warnings"]), summary
    assert [r.levelname for r in caplog.records if warning in r.getMessage()] == ["WARNING"]
