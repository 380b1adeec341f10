"""Attacks on the retries of the lease keeper of a handler call abandoned at
``handler.timeout_s`` (``recovery/executor/handover/abandoned.py``, commit f3a7d04: the
first renewal runs in the task, and (since the first finding here) fails the task whatever
it raises; later renewals are retried every 0.5 s while the call runs), through the job's
command line on the suite's session (``run_in_process``: the abandoned call and its keeper
live on in the reused Python worker after the run returned), checked in Redis (XPENDING,
ACL LOG, INFO stats, the handler's own records).

A test whose docstring says FINDING failed on the code it was written against (the commit
that adds it); one that says HOLDS passed and is kept as a check that its fault landed and
changed nothing it must not.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from recovery.redis_io.dlq_names import dead_letter_key
from tests.support.fault_tools import (
    descendants,
    finished,
    job_args,
    kill_tree,
    run_in_process,
    spark_submit,
    wait_until,
    write_control,
)
from tests.support.hung_calls import (
    FILE_HANG,
    HANGS_ONCE,
    MIN_IDLE_MS,
    NOX,
    OPTS,
    beating,
    file_beating,
    key_hung_on_file,
    pel_of,
    proc_state,
    second_run_past,
    use_venv_spark_submit,
    user_without_xclaim,
)
from tests.support.keeper_handlers import beats
from tests.support.order_edge_handlers import HANG, HANG_STARTED, RELEASE
from tests.support.order_handler import DONE, SEEN
from tests.support.order_tools import STREAM, args, pending_owners, recorded, rows_of, seed


def _rejected(client) -> int:  # type: ignore[no-untyped-def]
    """Connections Redis refused so far (maxclients reached): INFO stats."""
    return int(client.info("stats")["rejected_connections"])


def _xclaim_refusals(client) -> int:  # type: ignore[no-untyped-def]
    """How many XCLAIMs of the user nox the ACL LOG counted (entries are grouped)."""
    return sum(int(e["count"]) for e in client.acl_log(count=128)
               if e["username"] == "nox" and e["object"] == "xclaim")


def _full_for_the_first_renewal(redis_server, hang_dir: Path, head: str, limit: int,  # type: ignore[no-untyped-def]
                                fault: dict[str, int]) -> threading.Thread:
    """A thread that, once the call on `head` started, sets Redis' maxclients to the clients
    connected (the task's own connection goes on working) until the keeper's first renewal,
    on its fresh connection, was refused with its 3 redis-py retries (INFO stats
    rejected_connections: `fault`), then restores `limit`."""
    def at_the_limit() -> None:
        watcher = redis_server.client()
        watcher.ping()
        if not wait_until(lambda: (hang_dir / f"started-{head}").exists(), None, 120,
                          "the call on H to start"):
            return
        before = _rejected(watcher)
        watcher.config_set("maxclients", int(watcher.info("clients")["connected_clients"]))
        wait_until(lambda: _rejected(watcher) >= before + 4, None, 60,
                   "the keeper's connections to be refused")
        fault["rejected"] = _rejected(watcher) - before
        watcher.config_set("maxclients", limit)

    limiter = threading.Thread(target=at_the_limit, daemon=True)
    limiter.start()
    return limiter


@pytest.mark.slow
@pytest.mark.parametrize("min_idle_ms", [MIN_IDLE_MS, 6000])
def test_a_first_renewal_that_fails_for_any_reason_fails_the_task_and_ends_the_call(
        spark, redis_server, tmp_path: Path, min_idle_ms: int) -> None:
    """FINDING (fixed). Claims (docs/GUARANTEES.md "Delivery", docs/ACL.md): a timed-out
    call's entries stay leased to the job's consumer while it runs; with one permission
    missing the job stops with one line naming it, never silently.

    Run 1 runs as an ACL user allowed every command but XCLAIM (``+@all -xclaim``); its
    call on H (alone pending, unordered) hangs on a file at every attempt. When it starts,
    Redis is at its client limit for a moment (CONFIG SET maxclients to the clients
    connected: the task's own connection goes on working), so the keeper's first renewal, on
    a fresh connection at the timeout, is refused ("max number of clients reached": INFO
    stats rejected_connections grows).

    Found on f3a7d04, where only an ACL refusal of the first renewal was raised and any other
    failure was left to the keeper's thread: the thread's retries were then refused by the
    ACL every 0.5 s, swallowed, and (with claim.min_idle_ms 6000) never even logged; run 1
    exited 0, status ok; H aged on run 1's consumer while its call ran, and run 2 handed it
    over again: H succeeded while the first call on it still ran.

    Now the first renewal is one of the task's commands: whatever it raises fails the task
    attempt, whose worker exits and ends the call. The suite's ``local[2,3]`` retries the
    task; the handler hangs once per ID, so the retry's call on H succeeds: no call of run 1
    is left running, H succeeded once and is acked (or, the retries spent, the run stops
    with one line, H pending and never done); nothing is dead-lettered."""
    client = redis_server.client()
    hang_dir = tmp_path / "hang"
    hang_dir.mkdir()
    user_without_xclaim(client)
    head = seed(client, keys=1, per_key=1)["k0"][0]
    write_control(redis_server.url, hang_ids=[head], hang_dir=str(hang_dir))
    limit = int(client.config_get("maxclients")["maxclients"])
    fault: dict[str, int] = {}
    limiter = _full_for_the_first_renewal(redis_server, hang_dir, head, limit, fault)
    try:
        first = run_in_process(spark, [*job_args(
            redis_server.url, tmp_path / "r", [STREAM], *OPTS, FILE_HANG,
            f"claim.min_idle_ms={min_idle_ms}"), *NOX])
        limiter.join(60)
        beating_after = file_beating(hang_dir, head)
    finally:
        client.config_set("maxclients", limit)
        (hang_dir / "release").write_text("1")
    assert fault.get("rejected", 0) >= 1, f"the keeper's connection was not refused: {fault}"
    assert not beating_after, "a call abandoned by run 1 still runs: its lease is unkept"
    assert not client.exists(dead_letter_key(STREAM, ":dlq"))
    if first.code == 1:  # the retries spent
        assert len(first.error_lines()) == 1, (first.error_lines(), first.stderr[-3000:])
        assert (list(pel_of(client)), recorded(client, DONE, ["k0"])["k0"]) == ([head], [])
        return
    assert first.code == 0, first.stderr[-3000:]
    assert (recorded(client, DONE, ["k0"])["k0"], pel_of(client)) == ([head], {})


@pytest.mark.slow
def test_spark_submit_stops_with_the_xclaim_line_when_the_first_renewal_is_refused(
        redis_server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """HOLDS. Claim (GUARANTEES "Delivery", docs/ACL.md): the ACL refusing the keeper's first
    renewal (its XCLAIM) fails the task attempt, which ends the call with its worker, "and
    with the retries spent stops the job with the line naming XCLAIM (exit 1)".

    Through spark-submit (local[2]: a task is not retried), as the ACL user ``nox``
    (``+@all -xclaim``). The call on H (alone pending, unordered) hangs on Redis
    (``hangs_once``) and times out after 1 s; the keeper's first renewal, in the task, is
    refused (ACL LOG: xclaim of nox, in a script on Redis 7.0, whose reply does not name
    the command). Redis must show: the run exits 1 with one ``error:`` line naming XCLAIM,
    H still pending (not acked, not dead-lettered), its hung call ended with the worker (no
    beat after the run, no success recorded)."""
    use_venv_spark_submit(monkeypatch)
    client = redis_server.client()
    write_control(redis_server.url)
    user_without_xclaim(client)
    head = seed(client, keys=1, per_key=1)["k0"][0]
    client.sadd(HANG, head)
    logs = tmp_path / "logs"
    proc = spark_submit([*job_args(redis_server.url, tmp_path / "r", [STREAM], *OPTS,
                                   HANGS_ONCE), *NOX], logs)
    try:
        result = finished(proc, logs, 300)
        hung = bool(client.exists(HANG_STARTED + head))
        beating_after = beating(client, head)
    finally:
        client.set(RELEASE, 1)
        kill_tree(proc)
    refusals = _xclaim_refusals(client)
    assert hung, "the call on H never hung: no fault to test"
    assert refusals >= 1, "no XCLAIM refused in the ACL LOG: no fault to test"
    errors = result.error_lines()
    assert result.code == 1 and len(errors) == 1 and "XCLAIM" in errors[0], (
        result.code, errors, result.stderr[-3000:])
    assert list(pel_of(client)) == [head]
    assert not beating_after, "the abandoned call still runs after the run ended"
    assert recorded(client, DONE, ["k0"])["k0"] == []
    assert not client.exists(dead_letter_key(STREAM, ":dlq"))


OLD_PW = "old-pw-K33p3r-s3cret"


@pytest.mark.slow
def test_a_password_changed_mid_call_is_retried_quietly_and_never_printed(
        spark, redis_server, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """HOLDS. Claims (GUARANTEES "Delivery"; README: the password is never printed): a
    renewal that fails is tried again every 0.5 s while the call runs, the keeper never
    raises into the worker, logs the failing once (not once a try), and no message carries
    the password.

    Run 1 runs as the ACL user ``rot`` (``+@all``); its call on H hangs on a file. Then the
    password is rotated (``ACL SETUSER rot resetpass >new``) and the user's connections are
    killed (CLIENT KILL USER rot: at least the keeper's), so every reconnect of the keeper
    is refused (WRONGPASS): the ACL LOG must count repeated ``auth`` failures of ``rot``
    (the retries). Meanwhile the worker's stderr (the suite's captured output) must hold
    exactly one warning line about the failing renewals, and the old password nowhere."""
    capman = request.config.pluginmanager.getplugin("capturemanager")
    client = redis_server.client()
    hang_dir = tmp_path / "hang"
    hang_dir.mkdir()
    client.execute_command("ACL", "SETUSER", "rot", "on", f">{OLD_PW}", "~*", "&*", "+@all")
    client.execute_command("ACL", "LOG", "RESET")
    head = seed(client, keys=1, per_key=1)["k0"][0]
    write_control(redis_server.url, hang_ids=[head], hang_dir=str(hang_dir))
    rot = ["--set", "redis.username=rot", "--set", f"redis.password={OLD_PW}"]
    try:
        first = run_in_process(spark, [*job_args(redis_server.url, tmp_path / "r", [STREAM],
                                                 *OPTS, FILE_HANG), *rot])
        assert first.code == 0, first.stderr[-3000:]
        assert file_beating(hang_dir, head), "the timed-out call is not running: no fault"
        # the keeper's thread connects at its first renewal (a third of min_idle_ms)
        wait_until(lambda: any(c["user"] == "rot" for c in client.client_list()), None, 10,
                   "the keeper's connection as rot")
        capman.read_global_capture()  # the output so far: the rest is the outage's
        client.execute_command("ACL", "SETUSER", "rot", "resetpass", ">new-pw")
        killed = client.execute_command("CLIENT", "KILL", "USER", "rot")

        def auth_failures() -> int:
            return sum(int(e["count"]) for e in client.acl_log(count=128)
                       if e["username"] == "rot" and e["reason"] == "auth")
        wait_until(lambda: auth_failures() >= 12, None, 30, "the keeper's logins refused")
        failures = auth_failures()
        still_running = file_beating(hang_dir, head)
        _, err = capman.read_global_capture()
    finally:
        (hang_dir / "release").write_text("1")
    assert killed >= 1, "no connection of rot killed: no fault to test"
    assert still_running, "the call ended during the outage: no fault to test"
    assert OLD_PW not in err + first.stderr, "the old password was printed"
    warnings = [line for line in err.splitlines() if "renewing the lease" in line]
    assert len(warnings) == 1, (failures, warnings[:5], len(warnings))


def _sockets_and_threads(pids: list[int]) -> tuple[int, int]:
    """Open sockets and threads of the Python processes among `pids` (Spark's workers)."""
    sockets = threads = 0
    for pid in pids:
        try:
            if b"python" not in Path(f"/proc/{pid}/cmdline").read_bytes():
                continue
            fds = list(Path(f"/proc/{pid}/fd").iterdir())
            sockets += sum(1 for fd in fds if _link(fd).startswith("socket:"))
            threads += len(list(Path(f"/proc/{pid}/task").iterdir()))
        except OSError:
            continue
    return sockets, threads


def _link(fd: Path) -> str:
    try:
        return str(fd.readlink())
    except OSError:
        return ""


@pytest.mark.slow
def test_redis_away_for_good_while_a_call_hangs_leaks_nothing_and_logs_once(
        spark, redis_server, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """HOLDS. Claim (GUARANTEES "Delivery"): a renewal that fails (Redis away) is tried
    again every 0.5 s while the call runs; a keeper never raises into the worker. ATTACKS:
    a server that goes away mid-run.

    Run 1's call on H hangs on a file (not on Redis); then Redis is SIGKILLed and stays
    away while the call runs 3 s more (150 beats). Proved: the worker's stderr holds the
    keeper's warning about its failing renewals (ConnectionError). Meanwhile Spark's Python
    processes must not gain sockets or threads (one keeper, one connection, retried), and
    the warning is printed once, not once a try."""
    capman = request.config.pluginmanager.getplugin("capturemanager")
    client = redis_server.client()
    hang_dir = tmp_path / "hang"
    hang_dir.mkdir()
    head = seed(client, keys=1, per_key=1)["k0"][0]
    write_control(redis_server.url, hang_ids=[head], hang_dir=str(hang_dir))
    try:
        first = run_in_process(spark, job_args(redis_server.url, tmp_path / "r", [STREAM],
                                               *OPTS, FILE_HANG))
        assert first.code == 0, first.stderr[-3000:]
        assert file_beating(hang_dir, head), "the timed-out call is not running: no fault"
        capman.read_global_capture()
        redis_server.kill()
        err = ""

        def warned() -> bool:
            nonlocal err
            err += capman.read_global_capture()[1]
            return "renewing the lease" in err
        wait_until(warned, None, 30, "the keeper's warning")
        at_start = _sockets_and_threads(descendants(os.getpid()))
        beat = beats(hang_dir, head)
        wait_until(lambda: beats(hang_dir, head) >= beat + 150, None, 60,
                   "the hung call to run 3 s more with Redis away")
        at_end = _sockets_and_threads(descendants(os.getpid()))
        err += capman.read_global_capture()[1]
        still_running = file_beating(hang_dir, head)
    finally:
        if redis_server.process is None:
            redis_server.restart()
        (hang_dir / "release").write_text("1")
    warnings = [line for line in err.splitlines() if "renewing the lease" in line]
    assert still_running, "the call ended during the outage: no fault to test"
    assert "ConnectionError" in warnings[0], warnings
    assert len(warnings) == 1, warnings[:5]
    assert at_end[0] <= at_start[0] and at_end[1] <= at_start[1], (at_start, at_end)


@pytest.mark.slow
def test_redis_stopped_across_the_timeout_delays_the_first_renewal_and_keeps_key_order(
        spark, redis_server, tmp_path: Path) -> None:
    """HOLDS. Claims (GUARANTEES "Per-key order", "Delivery"): a head whose call timed out
    holds its key while the call runs; the first renewal, now in the task, is bounded by
    the socket timeouts and a Redis back within claim.min_idle_ms finds the entry leased.

    k0 holds H, E2, E3 (per-key order, claim.min_idle_ms 6000). Run 1's call on H hangs on a
    file; 0.5 s after it started, Redis is SIGSTOPped for 2 s (across the 1 s timeout: the
    task's first renewal waits on a frozen server; proved: /proc state T while stopped).
    After SIGCONT run 1 must exit 0 with H failed (timed out) and E2, E3 held; H pending on
    run 1's consumer; and run 2, started after the call ran 3 s more (past the stop) while it
    still runs, must hand nothing of k0 over."""
    client, hang_dir, head, later = key_hung_on_file(redis_server, tmp_path)
    pid = redis_server.process.pid  # type: ignore[union-attr]
    states: list[str] = []

    def stop_across_the_timeout() -> None:
        if not wait_until(lambda: (hang_dir / f"started-{head}").exists(), None, 120,
                          "the call on H to start"):
            return
        time.sleep(0.5)  # the fault's place: before the 1 s timeout, not an assertion
        os.kill(pid, 19)  # SIGSTOP
        try:
            time.sleep(0.2)
            states.append(proc_state(pid))
            time.sleep(1.8)
        finally:
            os.kill(pid, 18)  # SIGCONT

    stopper = threading.Thread(target=stop_across_the_timeout, daemon=True)
    stopper.start()
    opts = (*OPTS, FILE_HANG, "claim.min_idle_ms=6000")
    reports = tmp_path / "r"
    try:
        first = run_in_process(spark, args(redis_server.url, reports, *opts))
        stopper.join(30)
        rows = rows_of(spark, reports, first.summary)
        owner = pending_owners(client).get(head)
        still_running, seen, pel = second_run_past(
            spark, client, redis_server.url, reports, hang_dir, head, [],
            beats(hang_dir, head), "the fault", opts)
    finally:
        (hang_dir / "release").write_text("1")
    assert states[:1] == ["T"], f"Redis was not stopped: {states}"
    assert still_running, "the call ended before run 2 did: no fault to test"
    assert first.code == 0, first.stderr[-2000:]
    assert rows[head]["action"] == "failed" and "timed out" in (rows[head]["error"] or "")
    assert [rows[i]["action"] for i in later] == ["held", "held"], [rows[i] for i in later]
    assert pel[head][0] == owner and seen == [head], (owner, pel, seen)


@pytest.mark.slow
def test_a_dependency_hung_in_every_task_attempt_stops_the_run_naming_xclaim(
        spark, redis_server, tmp_path: Path) -> None:
    """HOLDS. Claim (GUARANTEES "Delivery"): the ACL refusing the first renewal fails the
    task attempt, which ends the call with its worker, "and with the retries spent stops the
    job with the line naming XCLAIM (exit 1)".

    On the suite's session (local[2,3]: a task is tried 3 times), as ``nox`` (``+@all
    -xclaim``); the call on H hangs on a file in every attempt (the test removes the call's
    once-marker as soon as it appears, so each retry's call hangs too; a retry that starts
    while H is younger than ``min_idle_ms`` renews H's lease first, refused too, and never
    calls). Redis must show: three XCLAIMs refused, each hung call ended with its worker
    (none beats after the run), H still pending, no success recorded, nothing
    dead-lettered; the run exits 1 with one ``error:`` line naming XCLAIM."""
    client = redis_server.client()
    hang_dir = tmp_path / "hang"
    hang_dir.mkdir()
    client.execute_command("ACL", "SETUSER", "nox", "on", ">nox-pw", "~*", "&*", "+@all",
                           "-xclaim")
    head = seed(client, keys=1, per_key=1)["k0"][0]
    write_control(redis_server.url, hang_ids=[head], hang_dir=str(hang_dir))
    marker = hang_dir / f"started-{head}"
    done = threading.Event()

    def every_attempt_hangs() -> None:
        while not done.is_set():
            if marker.exists():
                time.sleep(0.05)
                marker.unlink(missing_ok=True)
            time.sleep(0.01)

    remover = threading.Thread(target=every_attempt_hangs, daemon=True)
    remover.start()
    try:
        result = run_in_process(spark, [*job_args(redis_server.url, tmp_path / "r", [STREAM],
                                                  *OPTS, FILE_HANG), *NOX])
        done.set()
        remover.join(5)
        beating_after = file_beating(hang_dir, head)
    finally:
        done.set()
        (hang_dir / "release").write_text("1")
    seen = recorded(client, SEEN, ["k0"])["k0"]
    assert seen, "the call on H never hung: no fault"
    # Every attempt ended at a refused XCLAIM (the local[2,3] session tries a task 3 times):
    # its hung call's first renewal, or, for a retry that came within min_idle_ms of it, the
    # renewal of H's lease before the call (so that retry never called).
    assert _xclaim_refusals(client) >= 3, (seen, _xclaim_refusals(client))
    errors = result.error_lines()
    assert result.code == 1 and len(errors) == 1 and "XCLAIM" in errors[0], (
        result.code, errors, result.stderr[-3000:])
    assert not beating_after, "a hung call still runs after the run ended"
    assert list(pel_of(client)) == [head] and recorded(client, DONE, ["k0"])["k0"] == []
    assert not client.exists(dead_letter_key(STREAM, ":dlq"))


@pytest.mark.slow
@pytest.mark.parametrize("reply", ["READONLY", "MASTERDOWN"])
def test_a_redis_turned_replica_for_a_while_finds_the_hung_heads_lease_renewed_after(
        spark, redis_server, tmp_path: Path, reply: str) -> None:
    """HOLDS. Claim (GUARANTEES "Delivery", "Per-key order"): a renewal that fails is tried
    again every 0.5 s while the call runs; a head whose call timed out holds its key.

    k0 holds H, E2, E3 (per-key order, claim.min_idle_ms 1500). Run 1's call on H hangs on
    a file. Then Redis is made a replica of a master that does not answer (REPLICAOF
    127.0.0.1 <closed port>: its data stays) for as long as it takes H to be idle past
    claim.min_idle_ms: the keeper's renewals are answered READONLY (and, with
    replica-serve-stale-data no, MASTERDOWN for every command); proved by a probe's reply
    and by H's idle time in XPENDING. Made a master again (REPLICAOF NO ONE), Redis must
    show H renewed by the keeper (idle below claim.min_idle_ms again, owner unchanged), and
    run 2, while the call still runs, hands nothing of k0 over."""
    import socket

    import redis as redis_lib

    client = redis_server.client()
    hang_dir = tmp_path / "hang"
    hang_dir.mkdir()
    ids = seed(client, keys=1, per_key=3)["k0"]
    head = ids[0]
    write_control(redis_server.url, hang_ids=[head], hang_dir=str(hang_dir))
    reports = tmp_path / "r"
    opts = (*OPTS, FILE_HANG)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead_port = s.getsockname()[1]
    probe_reply = ""
    try:
        first = run_in_process(spark, args(redis_server.url, reports, *opts))
        assert first.code == 0, first.stderr[-3000:]
        owner = pending_owners(client)[head]
        assert file_beating(hang_dir, head), "the timed-out call is not running: no fault"
        if reply == "MASTERDOWN":
            client.config_set("replica-serve-stale-data", "no")
        client.execute_command("REPLICAOF", "127.0.0.1", dead_port)
        try:
            try:
                client.execute_command("XADD" if reply == "READONLY" else "GET", "probe", *(
                    ["*", "f", "v"] if reply == "READONLY" else []))
            except redis_lib.ResponseError as exc:  # redis-py keeps the code in the class
                probe_reply = type(exc).__name__
            time.sleep(MIN_IDLE_MS / 1000 + 0.3)  # the outage: past min_idle_ms, not asserted
            outage_idle = pel_of(client)[head][1] if reply == "READONLY" else None
        finally:
            client.execute_command("REPLICAOF", "NO", "ONE")
            client.config_set("replica-serve-stale-data", "yes")
        renewed = wait_until(lambda: pel_of(client)[head][1] < MIN_IDLE_MS, None, 10,
                             "H renewed after the outage")
        still_running, seen, pel = second_run_past(
            spark, client, redis_server.url, reports, hang_dir, head, [],
            beats(hang_dir, head), "the fault", opts)
    finally:
        (hang_dir / "release").write_text("1")
    expected = {"READONLY": "ReadOnlyError", "MASTERDOWN": "MasterDownError"}[reply]
    assert probe_reply == expected, f"Redis did not answer {reply}: {probe_reply!r}"
    if outage_idle is not None:
        assert outage_idle >= MIN_IDLE_MS, f"H renewed during the outage: idle {outage_idle}"
    assert still_running, "the call ended before run 2 did: no fault to test"
    assert renewed
    assert seen == [head] and pel[head][0] == owner, (seen, pel, owner)


@pytest.mark.slow
def test_several_calls_timed_out_in_one_task_keep_one_connection_each_and_no_more(
        spark, redis_server, tmp_path: Path) -> None:
    """HOLDS. Claim (abandoned.py): each abandoned call's keeping runs "on a connection of
    its own": the first renewal's connection (in the task) is the thread's, none is left
    behind by it. ATTACKS: many timed-out calls in one run (the server's maxclients).

    Three streams, one entry each, one task (unordered); each call hangs on a file and times
    out (one per unit). After the run, while the three calls run, Redis' CLIENT LIST must
    show exactly three connections named ``stream-recovery`` (the job's own are closed),
    all three entries pending on the run's consumers and renewed (idle below
    claim.min_idle_ms once the calls ran 3 s)."""
    client = redis_server.client()
    hang_dir = tmp_path / "hang"
    hang_dir.mkdir()
    streams = ["s0", "s1", "s2"]
    heads = {}
    for s in streams:
        heads[s] = seed(client, keys=1, per_key=1, stream=s)["k0"][0]
        time.sleep(0.01)  # distinct IDs: the hang markers are named by ID
    assert len(set(heads.values())) == 3, heads
    write_control(redis_server.url, hang_ids=list(heads.values()), hang_dir=str(hang_dir))
    try:
        first = run_in_process(spark, job_args(redis_server.url, tmp_path / "r", streams,
                                               *OPTS, FILE_HANG))
        assert first.code == 0, first.stderr[-3000:]
        hung = all(file_beating(hang_dir, h) for h in heads.values())
        last = heads["s2"]
        beat = beats(hang_dir, last)
        wait_until(lambda: beats(hang_dir, last) >= beat + 150, None, 60,
                   "the last hung call to run 3 s more")
        names = [c.get("name") for c in client.client_list()]
        pels = {s: pel_of(client, s).get(h) for s, h in heads.items()}
        still = all(file_beating(hang_dir, h) for h in heads.values())
    finally:
        (hang_dir / "release").write_text("1")
    assert hung and still, "the three calls were not all hung throughout: no fault to test"
    assert names.count("stream-recovery") == 3, names
    assert all(p is not None and p[1] < MIN_IDLE_MS for p in pels.values()), pels
