"""A run ID is used once, and the job's own keys are never other people's problem (issue 60,
parts 4 and 5): ``recovery.redis_io.run_ids`` (the registration, the split traces),
``recovery.driver.run_ids`` (the refusals, before anything is touched), the split cursors'
per-opening nonce (``recovery.redis_io.split_cursors``) and discovery's silence over the
job's own keys (``recovery.driver.discovery``, ``recovery.targets.keys.is_own_key``).

Every refusal is checked in Redis itself: every key's DUMP (which holds a stream's PEL with
its owners, delivery counts and delivery times) and TTL as before the refused run."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from redis import Redis

from recovery.driver.discovery import WorkUnit, discover
from recovery.driver.split import open_split
from recovery.redis_io.redis_conn import RedisConn
from recovery.redis_io.run_ids import (
    TTL_S,
    register_run,
    registration_key,
    split_key_pattern,
    split_traces,
)
from recovery.redis_io.split_cursors import TTL_MS, cursor_key, ranges_key
from recovery.rows import Skipped
from recovery.settings.model import load_settings, redis_params
from tests.support.fault_tools import (
    GROUP,
    finished,
    handed_over,
    job_args,
    kill_tree,
    report_rows,
    rows_by_key,
    run_in_process,
    spark_submit,
    write_control,
)
from tests.support.journal_rows_tools import seed_stream

SETTINGS = ("claim.min_idle_ms=1000",)


def snapshot(client: Redis) -> dict[bytes, tuple[bytes, bool]]:
    """Every key: its DUMP and whether it has a TTL (a refused run touches none of them)."""
    return {k: (client.dump(k), client.pttl(k) > 0) for k in client.scan_iter(count=1000)}


def killed_runs_keys(client: Redis, stream: str, run_id: str) -> dict[str, bytes]:
    """What a SIGKILLed split run leaves (a cursor, a part's range list, its registration, a
    claim journal), each with its TTL as the job sets it; name -> DUMP."""
    cursor = cursor_key(stream, GROUP, run_id, "0a0b0c0d")
    assert cursor is not None
    ranges = ranges_key(cursor, f"recovery-{run_id}-1")
    client.set(cursor, "(1-5", px=TTL_MS)
    client.rpush(ranges, "0-0 1-5")
    client.pexpire(ranges, TTL_MS)
    client.set(registration_key("recovery", run_id), f"{run_id} 0", ex=TTL_S)
    journal = f"recovery:journal:recovery-{run_id}-0"
    client.rpush(journal, f"run {run_id}")
    client.expire(journal, TTL_S)
    return {k: client.dump(k) for k in (cursor, ranges, registration_key("recovery", run_id),
                                        journal)}


# --- the registration: SET NX, once -------------------------------------------------------

def test_two_drivers_registering_one_run_id_at_once_get_it_once(redis_server):
    """Eight clients register one ID at the same moment: exactly one gets it; the key holds
    that one's value, with a TTL."""
    clients = [redis_server.client() for _ in range(8)]
    key, got = registration_key("recovery", "twin"), [None] * 8
    start = threading.Barrier(8)

    def register(i: int) -> None:
        start.wait()
        got[i] = register_run(clients[i], key, "twin")  # type: ignore[call-overload]

    threads = [threading.Thread(target=register, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(got, key=str) == [False] * 7 + [True], got
    assert clients[0].get(key).startswith(b"twin ")
    assert 0 < clients[0].ttl(key) <= TTL_S


def test_split_traces_are_found_for_that_run_id_only(redis_server):
    """The SCAN pattern matches a run's cursor and range lists, never another run's whose ID
    it would match as a glob (``a*`` against ``ab``)."""
    client = redis_server.client()
    cursor = cursor_key("s", GROUP, "ab", "00000000")
    assert cursor is not None
    client.set(cursor, "0-0")
    assert split_traces(client, "a*") == [] and split_traces(client, "a?") == []
    assert split_traces(client, "ab") == [cursor]
    assert split_key_pattern("a*[") == "*:recovery-split:a\\*\\[:*"


def test_each_opening_of_a_runs_cursors_has_names_of_its_own(redis_server):
    """A run ID opened twice (a rerun with the same ID) gets other cursor names, and so other
    range lists: its parts never walk the ranges the earlier opening recorded."""
    client = redis_server.client()
    units = [WorkUnit("big", GROUP, 100), WorkUnit("small", GROUP, 1)]
    first = open_split(client, units, 4, 10, 5, "same")
    second = open_split(client, units, 4, 10, 5, "same")
    assert first is not None and second is not None
    (one,), (two,) = first.created, second.created
    assert one != two and one.startswith("{big}:recovery-split:same:")
    assert ranges_key(one, "recovery-same-0") != ranges_key(two, "recovery-same-0")
    assert 0 < client.pttl(two) <= TTL_MS


# --- part 5: discovery leaves the job's own keys alone ------------------------------------

def test_discovery_never_lists_the_jobs_own_keys_as_skipped(redis_server, tmp_path):
    """``streams.match = "*"`` over a killed split run's cursor, range list, registration and
    journal: none is a skipped source; another job's string key still is, and a stream
    named like a journal is still recovered."""
    client = redis_server.client()
    seed_stream(client, "orders", GROUP, 3)
    seed_stream(client, "recovery:journal:not-a-list", GROUP, 2)
    killed_runs_keys(client, "{big}", "KA")
    client.set("other:config", "x")
    settings = load_settings(None, [f"redis.url={redis_server.url}", "streams.match=*",
                                    f"report.path={tmp_path}"])
    job_conn = RedisConn.open(redis_params(settings))  # the job's own (RESP2)
    units, skipped = discover(job_conn, settings)
    job_conn.close()
    assert sorted((u.stream, u.pending) for u in units) == [
        ("orders", 3), ("recovery:journal:not-a-list", 2)]
    assert skipped == [Skipped("other:config", None,
                               "not a stream (type string): left alone")], skipped


# --- part 4: a used run ID is refused, nothing touched ------------------------------------

def refused_untouched(spark: Any, client: Redis, args: list[str], run_id: str,
                      trace: str) -> None:
    """A run with `args` is refused: exit 2, one line naming `run_id`, the `trace` and the
    fix; Redis as it was, nothing handed over, no report for it."""
    client.delete("test:handled")
    before = snapshot(client)
    result = run_in_process(spark, args)
    assert result.code == 2, result.stderr[-3000:]
    (line,) = result.error_lines()
    assert f"--run-id {run_id} is taken" in line and trace in line, line
    assert "omit --run-id" in line and "pick another" in line, line
    assert snapshot(client) == before
    assert handed_over(client) == {}


@pytest.mark.slow
def test_a_finished_runs_id_is_refused_on_a_new_stream(spark, redis_server, tmp_path):
    """Run ``done`` finishes on s1 (its registration is then gone: the report is its
    trace). The same ID on a new stream s2 is refused before Redis is touched; the report
    partition keeps its rows; a run with another ID recovers s2."""
    client = redis_server.client()
    write_control(redis_server.url)
    ids_1 = seed_stream(client, "s1", GROUP, 4)
    done = run_in_process(spark, job_args(redis_server.url, tmp_path, ["s1"], *SETTINGS,
                                          run_id="done"))
    assert done.code == 0, done.stderr[-3000:]
    assert client.keys("recovery:run:*") == [], "a finished run's registration is deleted"
    ids_2 = seed_stream(client, "s2", GROUP, 3)
    refused_untouched(spark, client, job_args(redis_server.url, tmp_path, ["s2"], *SETTINGS,
                                              run_id="done"), "done", "report partition")
    rows = rows_by_key(report_rows(spark, tmp_path, "done") or [])
    assert {k: len(v) for k, v in rows.items()} == {("s1", GROUP, i): 1 for i in ids_1}
    other = run_in_process(spark, job_args(redis_server.url, tmp_path, ["s2"], *SETTINGS,
                                           run_id="other"))
    assert other.code == 0, other.stderr[-3000:]
    assert handed_over(client) == {("s2", GROUP, i): 1 for i in ids_2}


@pytest.mark.slow
@pytest.mark.parametrize("trace", ["registration", "split"])
def test_a_run_id_with_a_trace_in_redis_is_refused_without_a_journal(
        spark, redis_server, tmp_path, trace):
    """``claim.journal_prefix = ""`` (no journal to find): a run ID that another driver holds
    (its registration, as when both started at once), or whose killed split run left a
    cursor, is refused, nothing touched."""
    client = redis_server.client()
    write_control(redis_server.url)
    seed_stream(client, "s", GROUP, 3)
    if trace == "registration":
        client.set(registration_key("recovery", "held"), "held 0", ex=60)
        named = registration_key("recovery", "held")
    else:
        named = str(cursor_key("s", GROUP, "held", "0a0b0c0d"))
        client.set(named, "(1-5", px=TTL_MS)
    refused_untouched(spark, client, job_args(redis_server.url, tmp_path, ["s"], *SETTINGS,
                                              "claim.journal_prefix=", run_id="held"),
                      "held", named)
    assert report_rows(spark, tmp_path, "held") is None


@pytest.mark.slow
def test_a_match_all_run_over_a_killed_runs_keys_is_ok(spark, redis_server, tmp_path):
    """A killed split run's own keys are there; a run with ``streams.match = "*"`` recovers
    the stream, says ``ok`` with nothing skipped, leaves those keys as they are (they
    expire: each has a TTL), and leaves none of its own behind."""
    client = redis_server.client()
    write_control(redis_server.url)
    ids = seed_stream(client, "orders", GROUP, 3)
    left = killed_runs_keys(client, "{big}", "KA")
    args = _without_keys(job_args(redis_server.url, tmp_path, ["orders"], *SETTINGS,
                                  run_id="after"))
    result = run_in_process(spark, [*args, "--set", "streams.match=*"])
    assert result.code == 0, result.stderr[-3000:]
    assert result.summary["status"] == "ok" and result.summary["skipped"] == [], \
        result.summary
    assert handed_over(client) == {("orders", GROUP, i): 1 for i in ids}
    assert {k: client.dump(k) for k in left} == left
    assert all(client.pttl(k) > 0 for k in left)
    own = [k for k in client.scan_iter(count=1000) if b"after" in k]
    assert own == [], own


def _without_keys(args: list[str]) -> list[str]:
    """`args` without their ``--set streams.keys=...`` pair."""
    out: list[str] = []
    for arg in args:
        if arg.startswith("streams.keys="):
            out.pop()
        else:
            out.append(arg)
    return out



def test_a_registration_re_sent_after_a_lost_reply_is_still_this_runs(redis_server):
    """The client retries a SET whose reply was lost: the second send finds the value the
    first one wrote and takes it as this run's; another run's value is not."""
    client = redis_server.client()
    key = registration_key("recovery", "lost")
    replies = []
    original = client.set

    def set_then_lose_the_reply(*args: Any, **kwargs: Any) -> Any:
        original(*args, **kwargs)  # written: the server answered, the answer was lost
        replies.append("lost")
        return original(*args, **kwargs)  # the retry: NX finds the key there (None)

    client.set = set_then_lose_the_reply  # type: ignore[method-assign]
    assert register_run(client, key, "lost") is True and replies == ["lost"]
    client.set = original  # type: ignore[method-assign]
    assert register_run(client, key, "lost") is False


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_two_drivers_started_at_once_with_one_run_id_run_once(spark, redis_server, tmp_path):
    """Two spark-submit drivers with one ``--run-id`` started together (no claim journal):
    one runs (exit 0),
    the other is refused (exit 2, one line naming the ID), whichever reaches Redis second;
    each entry is handed over once and reported once."""
    client = redis_server.client()
    write_control(redis_server.url)
    client.delete("test:handled")
    ids = seed_stream(client, "s", GROUP, 40)
    args = job_args(redis_server.url, tmp_path, ["s"], *SETTINGS, "claim.journal_prefix=",
                    run_id="twin")  # no journal: the registration alone tells them apart
    procs = [spark_submit(args, tmp_path / f"logs{i}", master="local[2,2]") for i in (0, 1)]
    try:
        results = [finished(p, tmp_path / f"logs{i}", 300) for i, p in enumerate(procs)]
    finally:
        for proc in procs:
            if proc.poll() is None:
                kill_tree(proc)
    codes = sorted(r.code for r in results)
    assert codes == [0, 2], [r.stderr[-2000:] for r in results]
    (line,) = next(r for r in results if r.code == 2).error_lines()
    assert "--run-id twin is taken" in line, line
    assert handed_over(client) == {("s", GROUP, i): 1 for i in ids}
    rows = rows_by_key(report_rows(spark, tmp_path, "twin") or [])
    assert {k: len(v) for k, v in rows.items()} == {("s", GROUP, i): 1 for i in ids}
    assert client.keys("recovery:run:*") == []
