"""Attacks on the per-key ordered path's plumbing: the claim task that keys its entries, the
hand-over's report written by the workers' own files (``recovery.report.worker_files``) and
the lease reads' growing XPENDING pages. Each test checks Redis itself (XPENDING) and the
report files on disk, through the job's command line on the suite's session."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from pyspark.sql import functions as F

from recovery.report.run_report import run_path
from recovery.report.worker_files import STAGING, SUCCESS
from recovery.testing.backlog import add_entries, create_group, deliver, make_stuck
from tests.support.attack_order_handlers import BYTES_DONE, CRASH, CRASHED
from tests.support.backlogs import DEAD, HOUR_MS
from tests.support.fault_tools import (
    GROUP,
    kill_landed,
    report_rows,
    run_in_process,
    spark_submit,
    wait_until,
    write_control,
)
from tests.support.order_handler import COUNT, DONE, FAIL, SEEN, VIOLATIONS
from tests.support.order_tools import STREAM, args, pending_owners, recorded, seed

ANY_KEY = "tests.support.attack_order_handlers:any_key"
CRASH_ONCE = "tests.support.attack_order_handlers:crash_once"


def _run_dir(reports: Path, run_id: str) -> Path:
    return Path(run_path(str(reports), run_id))


def _reported_once(spark, reports: Path, run_id: str) -> dict[str, str]:
    """ID -> action of the run's committed report; fails on an entry reported twice."""
    rows = report_rows(spark, reports, run_id)
    assert rows is not None, "no report committed"
    ids = [r["id"] for r in rows]
    twice = sorted({i for i in ids if ids.count(i) > 1})
    assert not twice, f"entries reported twice: {twice[:5]}"
    return {r["id"]: r["action"] for r in rows}


@pytest.mark.slow
@pytest.mark.parametrize("fault", ["ordered 1 0", "ordered 2 0", "claim 1 0"])
def test_a_retried_task_reports_every_entry_once_and_leaves_no_staging(
        spark, redis_server, tmp_path: Path, faults, fault: str) -> None:
    """A hand-over (or claim) task fails once after its side effects; the suite's session
    retries it. The committed report must hold every entry exactly once (the failed
    attempt's file never moved in), agree with Redis (nothing reported acked is pending;
    the PEL empty), carry _SUCCESS, and no staging may be left behind."""
    client = redis_server.client()
    write_control(redis_server.url)
    ids = seed(client, keys=3, per_key=4)
    every = sorted(i for key_ids in ids.values() for i in key_ids)
    faults(fault)
    reports = tmp_path / "r"
    result = run_in_process(spark, args(redis_server.url, reports, "spark.partitions=2"))
    assert result.code == 0, result.stderr[-3000:]
    run_id = result.summary["run_id"]
    actions = _reported_once(spark, reports, run_id)
    assert sorted(actions) == every, "entries missing from the report"
    assert pending_owners(client) == {}, "entries left pending"
    done = recorded(client, DONE, sorted(ids))
    for key, key_ids in ids.items():
        assert sorted(set(done[key])) == sorted(key_ids), f"{key} not all handled"
    run_dir = _run_dir(reports, run_id)
    assert (run_dir / SUCCESS).exists()
    assert not (run_dir / STAGING).exists(), "staging left behind"
    assert all(p.name.startswith("part-") for p in run_dir.glob("*.parquet"))


ODD_KEYS = [b"\xff\xfe", b"", b"a\x00b", "é".encode(), b"{x} y:z"]


@pytest.mark.slow
def test_keys_of_odd_bytes_are_ordered_and_reported(spark, redis_server, tmp_path: Path
                                                    ) -> None:
    """Key values that are not UTF-8, empty, hold NUL, braces or spaces, keyed in the claim
    task: each key's head fails, so its later entries must stay pending (held), reported
    held; entries without the key field are reported once each; Redis agrees."""
    client = redis_server.client()
    write_control(redis_server.url)
    create_group(client, STREAM, GROUP)
    keyed = add_entries(client, STREAM, 3 * len(ODD_KEYS),
                        lambda i: {b"k": ODD_KEYS[i % len(ODD_KEYS)], b"n": str(i).encode()})
    keyless = add_entries(client, STREAM, 2, lambda i: {b"n": f"x{i}".encode()})
    every = keyed + keyless
    assert deliver(client, STREAM, GROUP, DEAD, len(every)) == every
    make_stuck(client, STREAM, GROUP, DEAD, every, HOUR_MS)
    heads = keyed[:len(ODD_KEYS)]
    client.sadd(FAIL, *heads)
    reports = tmp_path / "r"
    result = run_in_process(spark, [*args(redis_server.url, reports, "spark.partitions=2"),
                                    "--set", "handler.path=" + ANY_KEY])
    assert result.code == 0, result.stderr[-3000:]
    assert client.lrange(VIOLATIONS, 0, -1) == []
    done = {v.decode() for v in client.lrange(BYTES_DONE, 0, -1)}
    assert done.isdisjoint(keyed), f"entries handed over behind a failed head: {done}"
    pending = set(pending_owners(client))
    assert set(keyed) <= pending
    actions = _reported_once(spark, reports, result.summary["run_id"])
    assert sorted(actions) == sorted(every)
    assert {actions[i] for i in keyed[len(ODD_KEYS):]} == {"held"}


@pytest.mark.slow
def test_a_worker_killed_mid_hand_over_leaves_one_report_row_per_entry(
        spark, redis_server, tmp_path: Path) -> None:
    """The Python worker of a hand-over task dies (os._exit) right after a call's side
    effects, before its results come back; Spark retries the task. The committed report
    holds every entry once, the PEL is empty, no staging is left."""
    client = redis_server.client()
    write_control(redis_server.url)
    ids = seed(client, keys=3, per_key=4)
    every = sorted(i for key_ids in ids.values() for i in key_ids)
    client.sadd(CRASH, ids["k1"][1])
    reports = tmp_path / "r"
    result = run_in_process(spark, [*args(redis_server.url, reports, "spark.partitions=2"),
                                    "--set", "handler.path=" + CRASH_ONCE])
    assert result.code == 0, result.stderr[-3000:]
    assert client.get(CRASHED) == b"1"
    actions = _reported_once(spark, reports, result.summary["run_id"])
    assert sorted(actions) == every
    assert pending_owners(client) == {}
    run_dir = _run_dir(reports, result.summary["run_id"])
    assert (run_dir / SUCCESS).exists() and not (run_dir / STAGING).exists()


def _key_in_partition(spark, partition: int, partitions: int) -> str:
    """A key ``k<i>`` whose (stream, group, key) the ordered shuffle sends to `partition`
    (Spark's hash partitioning: pmod(hash(columns), partitions))."""
    keys = [(STREAM, GROUP, f"k{i}".encode()) for i in range(64)]
    frame = spark.createDataFrame(keys, "stream string, group string, order_key binary")
    rows = frame.select("order_key", F.expr(
        f"pmod(hash(stream, group, order_key), {partitions})").alias("p")).collect()
    return next(r["order_key"].decode() for r in rows if r["p"] == partition)


@pytest.mark.slow
def test_a_run_killed_mid_hand_over_leaves_no_report_and_a_new_run_reports_all(
        spark, redis_server, tmp_path: Path) -> None:
    """spark-submit SIGKILLed once one hand-over task has written its file into staging
    while the other is still handing over: the killed run's partition must not look
    finished (no _SUCCESS, no Parquet file a reader takes, its ID still refused); a new run
    (the killed run's claims idle by then) reports every entry left, once, and the PEL ends
    empty."""
    client = redis_server.client()
    write_control(redis_server.url, delay_s=0.05)
    fast, slow = _key_in_partition(spark, 0, 2), _key_in_partition(spark, 1, 2)
    create_group(client, STREAM, GROUP)
    ids = add_entries(client, STREAM, 1, lambda i: {"k": fast, "n": str(i)})
    ids += add_entries(client, STREAM, 200, lambda i: {"k": slow, "n": str(i)})
    assert deliver(client, STREAM, GROUP, DEAD, len(ids)) == ids
    make_stuck(client, STREAM, GROUP, DEAD, ids, HOUR_MS)
    reports = tmp_path / "r"
    quick = ("claim.min_idle_ms=1000", "spark.partitions=2", "handler.batch_size=5")
    proc = spark_submit([*args(redis_server.url, reports, *quick), "--run-id", "killed"],
                        tmp_path / "killed")
    staging = _run_dir(reports, "killed") / STAGING
    try:
        assert wait_until(lambda: any(staging.glob("*.parquet")), proc, 300,
                          "a task's file in staging"), \
            (tmp_path / "killed" / "stdout").read_text()[-3000:]
    finally:
        landed = kill_landed(proc)
    assert landed
    assert int(client.get(COUNT) or 0) < len(ids)  # killed with work left
    killed_dir = _run_dir(reports, "killed")
    assert not (killed_dir / SUCCESS).exists()
    assert report_rows(spark, reports, "killed") is None
    again = run_in_process(spark, [*args(redis_server.url, reports, *quick),
                                   "--run-id", "killed"])
    assert again.code == 2 and "--run-id killed is taken" in again.stderr, again.stderr
    write_control(redis_server.url)
    left = set(pending_owners(client))
    time.sleep(1.1)  # the killed run's claims idle (claim.min_idle_ms=1000)
    rerun = run_in_process(spark, args(redis_server.url, reports, *quick))
    assert rerun.code == 0, rerun.stderr[-3000:]
    actions = _reported_once(spark, reports, rerun.summary["run_id"])
    assert left <= set(actions)
    assert pending_owners(client) == {}
    assert report_rows(spark, reports, "killed") is None


@pytest.mark.slow
@pytest.mark.parametrize("name", ["entries", "health"])
def test_a_file_in_place_of_a_report_directory_is_refused_before_anything_is_claimed(
        spark, redis_server, tmp_path: Path, name: str) -> None:
    """``<report.path>/entries`` (or ``health``) is a file while report.path itself is a
    writable directory: the ordered run must refuse with one ``error:`` line and exit 2
    before it claims anything (the PEL as it was), not fail with exit 1 once its entries
    are claimed (they then wait on the job's consumer until idle again)."""
    client = redis_server.client()
    write_control(redis_server.url)
    seed(client, keys=2, per_key=3)
    reports = tmp_path / "r"
    reports.mkdir()
    (reports / name).write_text("not a directory")
    before = pending_owners(client)
    result = run_in_process(spark, args(redis_server.url, reports))
    assert result.code == 2, result.stderr[-3000:]
    assert len(result.error_lines()) == 1, result.stderr[-3000:]
    assert f"{reports / name} is not a writable directory" in result.stderr
    assert pending_owners(client) == before
    assert client.lrange(SEEN + "k0", 0, -1) == []


@pytest.mark.slow
def test_a_lease_read_pages_past_ten_thousand_held_entries_to_a_wave_head(
        spark, redis_server, tmp_path: Path) -> None:
    """Key ``h``'s 25,000 entries are held (its head pending on a live consumer, not idle)
    and stay on the job's consumer while the run lasts; they lie between the two heads of
    the first wave (``a``'s and ``z``'s entries). That wave's lease read finds ``z`` only
    after paging past 25,000 rows of its own (pages growing to 10,000): both heads must be
    handed over once, ``h``'s entries never, each reported once, Redis agreeing."""
    client = redis_server.client()
    write_control(redis_server.url)
    create_group(client, STREAM, GROUP)
    held_n = 25_000
    ids = add_entries(client, STREAM, 1, lambda i: {"k": "a"})
    ids += add_entries(client, STREAM, held_n + 1, lambda i: {"k": "h", "n": str(i)})
    ids += add_entries(client, STREAM, 1, lambda i: {"k": "z"})
    assert deliver(client, STREAM, GROUP, DEAD, len(ids)) == ids
    make_stuck(client, STREAM, GROUP, DEAD, ids, HOUR_MS)
    head = ids[1]
    client.xclaim(STREAM, GROUP, "alive", 0, [head], idle=0, justid=True)
    reports = tmp_path / "r"
    result = run_in_process(spark, args(redis_server.url, reports, "spark.partitions=1"))
    assert result.code == 0, result.stderr[-3000:]
    done = recorded(client, DONE, ["a", "h", "z"])
    assert done == {"a": [ids[0]], "h": [], "z": [ids[-1]]}
    owners = pending_owners(client)
    assert ids[0] not in owners and ids[-1] not in owners
    assert set(ids[1:-1]) <= set(owners)
    actions = _reported_once(spark, reports, result.summary["run_id"])
    assert sorted(actions) == sorted(ids[:1] + ids[2:])
    assert actions[ids[0]] == actions[ids[-1]] == "reprocessed"
    assert {actions[i] for i in ids[2:-1]} == {"held"}


@pytest.mark.slow
def test_a_file_uri_report_path_gets_the_workers_files_where_a_reader_finds_them(
        spark, redis_server, tmp_path: Path) -> None:
    """report.path given as a ``file://`` URI with a trailing slash: the ordered run's
    workers write the report into the same directory Spark reads it from (one row per
    entry, _SUCCESS, no staging), and nothing lands under a path named after the URI."""
    client = redis_server.client()
    write_control(redis_server.url)
    ids = seed(client, keys=2, per_key=3)
    reports = tmp_path / "r"
    result = run_in_process(spark, args(redis_server.url, f"file://{reports}/"))
    assert result.code == 0, result.stderr[-3000:]
    run_id = result.summary["run_id"]
    actions = _reported_once(spark, reports, run_id)
    assert sorted(actions) == sorted(i for v in ids.values() for i in v)
    assert (_run_dir(reports, run_id) / SUCCESS).exists()
    assert not (_run_dir(reports, run_id) / STAGING).exists()
    assert not list(Path.cwd().glob("file:*"))
    assert pending_owners(client) == {}
