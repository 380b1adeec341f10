"""Dry run (Redis unchanged) and group health in every report, on Redis and Valkey; the
one read per stream that discovery and the health share (recovery.redis_io.stream_full)
against the reads it replaces."""

from __future__ import annotations

import logging
import re
import time
from dataclasses import replace
from pathlib import Path

import pytest
from redis import Redis

from recovery.driver import discovery, job
from recovery.driver.health import collect_health
from recovery.driver.job import run
from recovery.params import RedisParams
from recovery.redis_io.dlq_names import DeadLetterNames
from recovery.redis_io.redis_conn import RedisConn
from recovery.report.run_report import health_path, read_run, run_path
from tests.support.backlogs import DEAD, LIVE, seed
from tests.support.fault_tools import GROUP, job_args, run_in_process, seed_kinds, write_control
from tests.support.handlers import TAKEN
from tests.support.invariants import Pending, pel, pel_by_delivery_count
from tests.support.reprocess_tools import seen_now
from tests.support.servers import CONSUMER_INACTIVE, FLAVORS, ON_ONE_SERVER, command_calls, has

STREAMS = ["orders", "bin{tag}"]
WORKERS_FILE = re.compile(r"part-\d{5}-[0-9a-f]{32}\.parquet")  # Spark's: ...-c000.snappy.parquet


def redis_snapshot(client: Redis) -> dict:
    """Everything a run could change: PEL rows (owner, count, idle), stream contents, consumers."""
    snap: dict = {}
    for stream in STREAMS:
        snap[stream] = client.xrange(stream)
        for group in ("billing",):
            # TIME and XPENDING in one transaction: the same server moment, however busy
            # the machine (separate round trips drifted 6 ms apart under load).
            (seconds, micros), rows = (client.pipeline(transaction=True).time()
                                       .xpending_range(stream, group, "-", "+", 100_000)
                                       .execute())
            now_ms = seconds * 1000 + micros // 1000
            snap[(stream, group)] = [(r["message_id"], r["consumer"], r["times_delivered"])
                                     for r in rows]
            # The last delivery time (now - idle) is what a claim would reset.
            snap[(stream, group, "delivered_at")] = [now_ms - r["time_since_delivered"]
                                                     for r in rows]
            snap[(stream, group, "consumers")] = sorted(
                c["name"] for c in client.xinfo_consumers(stream, group))
    snap["keys"] = sorted(client.keys("*"))
    return snap


PLAN = {"ok": "would_reprocess", "fail": "would_reprocess",
        "fail_at_limit": "would_reprocess",  # 4 deliveries + the claim = 5: not above 5
        "poison": "would_dead_letter", "deleted": "deleted"}


@pytest.mark.slow
# The dry run on every server, by Spark's writer; the workers' writer does not talk to Redis:
# on Redis 7.0 only.
@pytest.mark.parametrize(("server", "workers_write"),
                         [*((flavor, False) for flavor in FLAVORS), ("redis", True)],
                         ids=[*(f"{f}-spark-writer" for f in FLAVORS), "redis-workers-write"],
                         indirect=["server"])
def test_dry_run_plans_without_changing_redis(spark, client, make_settings, monkeypatch,
                                              workers_write):
    """The plan, written by Spark's writer (this session retries tasks) and, as a run
    without task retries writes it, by the Python workers (recovery.report.worker_files)."""
    if workers_write:
        monkeypatch.setattr(job, "retries_tasks", lambda master: False)
    seeded = seed(client, STREAMS, ["billing"])
    settings = make_settings("streams.match=*", "claim.max_deliveries=5")
    before = redis_snapshot(client)
    summary = run(spark, settings, dry_run=True)
    after = redis_snapshot(client)
    times = [k for k in before if isinstance(k, tuple) and k[-1] == "delivered_at"]
    for key in times:  # equal up to the rounding of TIME and of the idle times (ms)
        assert max(abs(a - b) for a, b in zip(after.pop(key), before.pop(key), strict=True)) <= 5
    assert after == before
    plan = {(r.stream, r.group, r.id): r.action
            for r in read_run(spark, settings.report.path, summary.run_id).collect()}
    expected = {k: PLAN[kind] for k, kind in seeded.kind.items() if kind in PLAN}
    assert plan == expected  # fresh entries (not idle) are not in the plan
    assert summary.dry_run and summary.totals["would_dead_letter"] == 24
    files = [p.name for p in Path(run_path(settings.report.path, summary.run_id)).iterdir()
             if p.suffix == ".parquet"]
    assert files and all(WORKERS_FILE.fullmatch(f) for f in files) == workers_write, files


@pytest.mark.slow
def test_health_is_reported_as_found_before_the_run(spark, client, make_settings, caplog):
    seed(client, ["orders"], ["billing"])
    settings = make_settings("streams.keys=orders")
    with caplog.at_level(logging.INFO, logger="recovery.driver.job"):
        summary = run(spark, settings)
    health = spark.read.parquet(health_path(settings.report.path, summary.run_id)).collect()
    assert len(health) == 1
    h = health[0].asDict(recursive=True)
    assert (h["stream"], h["group"], h["length"], h["pending"]) == ("orders", "billing", 158, 166)
    assert h["deliveries"] == {"1": 148, "4-5": 6, "6-10": 12}
    assert h["idle_ages"] == {"<1m": 10, "1h-1d": 156}
    assert h["oldest_idle_ms"] >= 3_600_000
    consumers = {c["name"]: c["pending"] for c in h["consumers"]}
    assert consumers == {DEAD: 156, LIVE: 10}
    # What the server can tell, as it tells it: Redis 6.2 has no lag and no inactive time,
    # and 7.0+ no lag after deletions; unknown is null, never 0, and "unknown" in the log.
    (group,) = client.xinfo_groups("orders")
    assert h["lag"] == group.get("lag")
    lag = "unknown" if h["lag"] is None else h["lag"]
    (line,) = [t for t in caplog.text.splitlines() if t.startswith("orders / billing: ")]
    assert line.startswith(f"orders / billing: 158, {lag}, 166,")
    assert {"1:148", "4-5:6", "6-10:12"} <= set(line.replace(",", " ").split())  # no dict repr
    inactive_known = has(client, CONSUMER_INACTIVE)
    assert all((c["inactive_ms"] is not None) == inactive_known for c in h["consumers"])
    assert summary.health["pending"] == 166 and summary.health["oldest_unit"] == "orders/billing"


@pytest.mark.slow
@ON_ONE_SERVER  # every server: test_health_is_reported_as_found_before_the_run, test_end_to_end
def test_an_entry_a_live_consumer_takes_from_the_job_is_counted_once(spark, server, tmp_path):
    """Issue 64: in one pass, the health histogram counts each claim step's PEL rows as found,
    then, once the unit is handed over, reads what the claim left (other consumers' rows).
    A live consumer takes two entries from the job between the two (in the handler's first
    call, a claim with a shorter min-idle, made at that moment on purpose); the handler fails
    them, so they stay pending, now on that consumer. Each row of the PEL is counted once:
    the histogram is XPENDING's rows as found, by delivery count, read from Redis before the
    run; the moved entries are checked in Redis after it."""
    client = server.client()
    # The failing ones first: the first claim step holds them, so the first call does.
    seed_kinds(client, ["h"], {"fail": (4, 1), "ok": (12, 1), "poison": (2, 9)})
    fresh = seen_now(client, "h", "app-live")  # too fresh to claim: read as left, once
    found = pel_by_delivery_count(client, "h", GROUP)
    assert found == {"1": 17, "6-10": 2}
    write_control(server.url, take_on_first_call=["app-live", 2])
    result = run_in_process(spark, job_args(server.url, tmp_path, ["h"], "claim.count=5",
                                            run_id="taken1"))
    assert result.code == 0, result.stderr

    taken = {i.decode() for i in client.smembers(TAKEN)}
    after = pel(client, "h", GROUP)
    assert len(taken) == 2 and {after[i] for i in taken} == {Pending("app-live", 3)}, \
        "claimed by the job, then by the live consumer, and left pending there"
    assert after[fresh] == Pending("app-live", 1)
    (health,) = [r.asDict(recursive=True) for r in
                 spark.read.parquet(result.summary["health_path"]).collect()]
    assert health["pending"] == sum(found.values())
    assert health["deliveries"] == found, "a row counted twice, or with its count after"
    assert health["idle_ages"] == {"1h-1d": 18, "<1m": 1}, health["idle_ages"]


@pytest.mark.slow
# Every server: the idle times read (test_discovery_reads_each_stream_once_...), the script
# (test_consumer_clean_up_deletes_only_empty_consumers_whatever_the_call_batch).
@ON_ONE_SERVER
def test_idle_empty_consumers_removed_only_on_request(spark, client, make_settings, caplog):
    seed(client, ["orders"], ["billing"])
    client.xgroup_createconsumer("orders", "billing", "idle-empty")
    client.xgroup_createconsumer("orders", "billing", b"idle-\xff")  # not UTF-8
    run(spark, make_settings("streams.keys=orders"))
    before = {c["name"] for c in client.xinfo_consumers("orders", "billing")}
    assert b"idle-empty" in before  # not asked to remove anything
    settings = make_settings("streams.keys=orders", "housekeeping.remove_idle_consumers_ms=1")
    with caplog.at_level(logging.INFO, logger="recovery.driver.health"):
        summary = run(spark, settings)
    names = {c["name"] for c in client.xinfo_consumers("orders", "billing")}
    # the log counts exactly the consumers that are gone (none for a name it cannot send)
    assert f"removed {len(before - names)} idle consumers" in caplog.text
    assert b"idle-empty" not in names
    assert LIVE.encode() in names  # it still owns pending entries: never removed
    assert b"idle-\xff" in names  # its name cannot be sent back as text: left alone
    (h,) = spark.read.parquet(health_path(settings.report.path, summary.run_id)).collect()
    assert "idle-\\xff" in {c["name"] for c in h["consumers"]}  # shown with an escape


def test_consumer_clean_up_deletes_only_empty_consumers_whatever_the_call_batch(
        server, client, monkeypatch):
    """The clean-up script deletes each consumer that owns nothing, keeps one that owns a
    pending entry, and a target whose group is gone costs only itself, across script calls
    of several targets each (checked in Redis)."""
    monkeypatch.setattr(discovery, "CLEAN_UP_PER_CALL", 2)
    for stream in ("a", "b"):
        client.xgroup_create(stream, "g", id="0", mkstream=True)
        client.xadd(stream, {"f": "v"})
    client.xreadgroup("g", "busy", {"a": ">"})
    for stream, consumer in (("a", "empty-1"), ("b", "empty-2"), ("b", "empty-3")):
        client.xgroup_createconsumer(stream, "g", consumer)
    targets = [("a", "g", "empty-1"), ("a", "nogroup", "x"), ("a", "g", "busy"),
               ("b", "g", "empty-2"), ("missing", "g", "y"), ("b", "g", "empty-3")]
    conn = RedisConn.open(RedisParams(url=server.url))
    try:
        removed = discovery.clean_up_consumers(conn, targets).removed
    finally:
        conn.close()
    assert removed == 3
    assert [c["name"] for c in client.xinfo_consumers("a", "g")] == [b"busy"]
    assert client.xinfo_consumers("b", "g") == []
    assert client.xpending("a", "g")["pending"] == 1


@ON_ONE_SERVER  # XINFO CONSUMERS on every server: test_discovery_reads_each_stream_once_...
def test_health_reads_a_streams_lengths_once_for_all_its_groups(server, client):
    """Two groups of one stream, one of another: a health row per group, each with its own
    consumers and its stream's length and dead-letter length, while the server ran XINFO
    CONSUMERS once per group and XLEN once per stream and once per dead-letter stream."""
    for stream, groups, entries in (("two", ("g1", "g2"), 5), ("one", ("g1",), 3)):
        for group in groups:
            client.xgroup_create(stream, group, id="0", mkstream=True)
        for i in range(entries):
            client.xadd(stream, {"n": str(i)})
        for group in groups:
            client.xreadgroup(group, f"{group}-worker", {stream: ">"}, count=2)
    client.xadd("{two}:dlq", {"x": "1"})
    client.xadd("{two}:dlq", {"x": "2"})
    units = [discovery.WorkUnit(s, g, 2, None, None)
             for s, g in (("two", "g1"), ("two", "g2"), ("one", "g1"))]
    before = {c: command_calls(client, c) for c in ("xlen", "xinfo")}
    conn = RedisConn.open(RedisParams(url=server.url))
    try:
        health = collect_health(conn, units, DeadLetterNames())
    finally:
        conn.close()
    after = {c: command_calls(client, c) for c in ("xlen", "xinfo")}
    assert {c: after[c] - before[c] for c in after} == {"xlen": 4, "xinfo": 3}
    assert [(h["stream"], h["group"], h["length"], h["dead_letter_length"],
             [(c["name"], c["pending"]) for c in h["consumers"]]) for h in health] == [
        ("two", "g1", 5, 2, [("g1-worker", 2)]),
        ("two", "g2", 5, 2, [("g2-worker", 2)]),
        ("one", "g1", 3, 0, [("g1-worker", 2)]),
    ]


def test_discovery_reads_each_stream_once_and_the_health_shows_what_xinfo_would(
        server, client, make_settings):
    """On a single server discovery reads each stream once (XINFO STREAM FULL, with the server's
    clock from INFO per round trip), and the group health then reads only the dead-letter
    lengths: rows equal to those of the reads it replaces (XINFO CONSUMERS, XLEN), idle and
    inactive times up to the time between the two reads below the server's own, at least the
    time since."""
    # names that are field names of the reply: read as names, never as fields
    for stream, groups in (("two", ("g1", "lag")), ("one", ("pel-count",))):
        for group in groups:
            client.xgroup_create(stream, group, id="0", mkstream=True)
        for i in range(4):
            client.xadd(stream, {"n": str(i)})
        for group in groups:
            client.xreadgroup(group, f"{group}-worker", {stream: ">"}, count=3)
    client.xgroup_createconsumer("two", "lag", "active-time")  # never active
    client.xadd("{one}:dlq", {"x": "1"})
    time.sleep(0.05)
    params = RedisParams(url=server.url)
    conn = RedisConn.open(params)
    try:
        before = {c: command_calls(client, c) for c in ("xlen", "xinfo")}
        units, _ = discovery.discover(conn, make_settings("streams.keys=two,one"))
        full = collect_health(conn, units, DeadLetterNames())
        after = {c: command_calls(client, c) for c in ("xlen", "xinfo")}
        unseen = collect_health(conn, [replace(u, seen=None) for u in units],
                                DeadLetterNames())
    finally:
        conn.close()
    assert {c: after[c] - before[c] for c in after} == {"xlen": 2, "xinfo": 2}
    assert [(h["stream"], h["group"], h["length"], h["pending"], h["dead_letter_length"])
            for h in full] == [
        ("two", "g1", 4, 3, 0), ("two", "lag", 4, 3, 0), ("one", "pel-count", 4, 3, 1)]
    lags = {(s, g["name"].decode()): g.get("lag") for s in ("one", "two")
            for g in client.xinfo_groups(s)}
    assert [h["lag"] for h in full] == [lags[(h["stream"], h["group"])] for h in full]
    times = ("idle_ms", "inactive_ms")
    assert [{**h, "consumers": [{k: v for k, v in c.items() if k not in times}
                                for c in h["consumers"]]} for h in full] == [
        {**h, "consumers": [{k: v for k, v in c.items() if k not in times}
                            for c in h["consumers"]]} for h in unseen]
    for seen_by_full, seen_later in zip(full, unseen, strict=True):
        for c, later in zip(seen_by_full["consumers"], seen_later["consumers"], strict=True):
            for key in times:
                if later[key] is None or later[key] == -1:  # unknown (before 7.2), never
                    assert c[key] == later[key], (c, later)
                else:
                    assert 50 <= c[key] <= later[key] < c[key] + 5_000, (c, later)


@pytest.mark.parametrize("first", ["missing", "a-list"])
def test_a_first_key_that_is_no_stream_does_not_turn_the_one_read_off(
        server, client, make_settings, first):
    """The first key's read, sent alone, decides whether discovery reads XINFO STREAM: a
    missing key or one of another type answers for itself, not for the command."""
    client.rpush("a-list", "x")
    client.xgroup_create("s", "g", id="0", mkstream=True)
    client.xadd("s", {"n": "1"})
    client.xreadgroup("g", "w", {"s": ">"})
    params = RedisParams(url=server.url)
    conn = RedisConn.open(params)
    try:
        units, skipped = discovery.discover(conn, make_settings(f"streams.keys={first},s"))
    finally:
        conn.close()
    assert [s.stream for s in skipped] == [first]
    assert [(u.stream, u.group, u.seen is not None) for u in units] == [("s", "g", True)]


@pytest.mark.slow
@ON_ONE_SERVER  # the log's tables; a whole run on every server: test_end_to_end
def test_log_tables_list_the_largest_units_and_count_the_others(spark, client, make_settings,
                                                               caplog):
    """report.log_units_max=1 over three streams: the health table lists the unit with the
    most pending entries, the summary table the one with the most failed entries (then the
    most entries), and each counts the other two; the TOTAL row counts all three, as the
    JSON summary and Redis do."""
    streams = ["t0", "t1", "t2"]
    seeded = seed(client, streams, ["billing"])
    by_kind: dict[tuple[str, str], list[str]] = {}
    for (stream, _, entry_id), kind in seeded.kind.items():
        by_kind.setdefault((stream, kind), []).append(entry_id)
    client.xack("t0", "billing", *by_kind[("t0", "ok")][:10])  # pending 156, 10 to fail
    client.xack("t1", "billing", *by_kind[("t1", "fail")][:4])  # pending 162, 6 to fail
    client.xack("t2", "billing", *by_kind[("t2", "ok")][:8])  # pending 158, 10 to fail
    settings = make_settings("streams.keys=t0,t1,t2", "claim.max_deliveries=5",
                             "handler.path=tests.support.handlers:verify_or_fail",
                             "report.log_units_max=1")
    with caplog.at_level(logging.INFO, logger="recovery.driver.job"):
        summary = run(spark, settings)
    lines = caplog.text.splitlines()
    health = [line for line in lines if re.match(r"t\d / billing: ", line)]
    assert [line.split(" ")[0] for line in health] == ["t1"]
    assert health[0].split(", ")[2] == "162"  # length, lag, pending, ...
    rows = [line.split() for line in lines if re.match(r"(t\d +billing|TOTAL) ", line)]
    assert [row[0] for row in rows] == ["t2", "TOTAL"]
    header = next(line.split() for line in lines if line.startswith("stream  group "))
    total_row = dict(zip(header[2:], rows[1][1:], strict=True))  # TOTAL has no group
    assert {a: int(total_row[a]) for a in summary.totals} == summary.totals
    unlisted = [line for line in lines if line.startswith("... and 2 more units not listed")]
    assert len(unlisted) == 2  # one under each table
    assert len(summary.units) == 3
    failed = {u["stream"]: u["failed"] for u in summary.units}
    assert failed == {"t0": 10, "t1": 6, "t2": 10}
    assert summary.totals["failed"] == sum(
        len([r for r in client.xpending_range(s, "billing", "-", "+", 1000)
             if r["consumer"].decode().startswith("recovery-")]) for s in streams)
