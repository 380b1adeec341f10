"""Dead letters as data (issue 29): read from real servers, grouped, warned about (the
thresholds of recovery.settings.dead_letters), and Redis left exactly as it was.

Dead letters are made with the real move script (``tests.support.redrive_tools``), so the
columns are checked against what ``dead_letter.lua`` writes, not against a copy of it.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import redis

from recovery.dead_letters.read import dead_letter_row
from recovery.dead_letters.report import DeadLetterSummary, views_path
from recovery.dead_letters.run import (
    find_dead_letter_streams,
    read_dead_letters,
    run_dead_letters,
)
from recovery.dead_letters.trend import health_trend
from recovery.driver.job import run
from recovery.jobs.dead_letters import DeadLettersJob
from recovery.schemas import HEALTH, arrow
from recovery.settings.model import Settings, load_settings, redis_params
from recovery.testing.backlog import add_entries, create_group, deliver, make_stuck
from recovery.testing.local_redis import LocalServer
from tests.support.redrive_tools import dead_letter, redrive

R_LIMIT, R_FAILED = "max-deliveries-exceeded", "handler-failed-at-limit"
TIMEOUTS = ["timeout after 3012 ms on order 88", "timeout after 17 ms on order 5"]


def settings_of(server: LocalServer, tmp_path: Path, *overrides: str) -> Settings:
    return load_settings(None, [f"redis.url={server.url}", f"report.path={tmp_path / 'r'}",
                                *overrides])


def snapshot(client: redis.Redis) -> dict[str, object]:
    """Everything a read could change: every key with its type and content, XINFO STREAM of
    each stream, INFO keyspace."""
    state: dict[str, object] = {"keyspace": client.info("keyspace")}
    for key in sorted(client.scan_iter(count=1000)):
        kind = client.type(key)
        state[repr(key)] = (kind, client.xrange(key) if kind == b"stream" else client.dump(key),
                            client.xinfo_stream(key) if kind == b"stream" else None)
    return state


def seed_causes(client: redis.Redis) -> dict[str, list[str]]:
    """Dead letters of two sources: orders/billing (2 timeouts, 1 over the limit, non-UTF-8
    fields) and pay{eu}/audit (1 with a quoted value). Source IDs per source."""
    for stream, group in (("orders", "billing"), ("pay{eu}", "audit")):
        create_group(client, stream, group)
    orders = dead_letter(client, "orders", "billing",
                         [{b"n": b"1"}, {b"n": b"2"}, {b"\xff-raw": b"\x00\xfe", b"n": b"3"}],
                         [R_FAILED, R_FAILED, R_LIMIT], [*TIMEOUTS, None])
    pay = dead_letter(client, "pay{eu}", "audit", [{b"amount": b"12.50"}], [R_FAILED],
                      ["bad currency 'XYZ' for 3f2504e0-4f89-11d3-9a0c-0305e82c3301"])
    return {"orders": orders, "pay{eu}": pay}


def test_a_row_splits_metadata_from_original_fields():
    flat = [b"payload", b"\x00\xff", b"x-redrive-count", b"2", b"\xfe-name", b"v", b"dup", b"1",
            b"dup", b"2", b"x-original-stream", b"orders", b"x-original-group", b"billing",
            b"x-original-id", b"5-1", b"x-delivery-count", b"6", b"x-delivery-limit", b"5",
            b"x-idle-ms", b"1000", b"x-death-reason", R_FAILED.encode(), b"x-death-time",
            b"1700000000123", b"x-run-id", b"run-t", b"x-original-consumer", b"old",
            b"x-exception-message", b"bad \xff byte"]
    assert dead_letter_row("{orders}:dlq", b"9-0", flat) == {
        "dead_letter_key": "{orders}:dlq", "dead_letter_id": "9-0", "source_stream": "orders",
        "group": "billing", "original_id": "5-1", "original_consumer": "old",
        "delivery_count": 6, "delivery_limit": 5, "death_reason": R_FAILED,
        "death_time_ms": 1700000000123, "death_run_id": "run-t",
        "exception_message": "bad \\xff byte", "idle_ms": 1000, "redrive_count": 2,
        "fields": [("payload", b"\x00\xff"), ("\\xfe-name", b"v"), ("dup", b"1")]}
    foreign = dead_letter_row("k", b"1-0", [b"x-death-time", b"soon", b"a", b"b"])
    assert foreign["source_stream"] is None and foreign["death_time_ms"] is None
    assert foreign["fields"] == [("x-death-time", b"soon"), ("a", b"b")]


@pytest.mark.slow
def test_reads_every_dead_letter_as_the_move_script_wrote_it(spark, server, tmp_path):
    client = server.client()
    before_ms = int(datetime.now(UTC).timestamp() * 1000)
    sources = seed_causes(client)
    before = snapshot(client)

    rows = read_dead_letters(spark, settings_of(server, tmp_path, "streams.keys=orders,pay{eu}",
                                                "spark.partitions=2")).collect()

    assert snapshot(client) == before  # read-only
    dlq_ids = {k: [i.decode() for i, _ in client.xrange(k)]
               for k in ("{orders}:dlq", "pay{eu}:dlq")}
    got = sorted((r.dead_letter_key, r.dead_letter_id, r.source_stream, r.group, r.original_id,
                  r.original_consumer, r.delivery_count, r.delivery_limit, r.death_reason,
                  r.death_run_id, r.exception_message, r.idle_ms, r.redrive_count,
                  tuple(sorted(r.fields.items()))) for r in rows)
    orders = [("{orders}:dlq", dlq_ids["{orders}:dlq"][i], "orders", "billing",
               sources["orders"][i], "old", 6, 5, reason, "run-t", error, 1000, None, fields)
              for i, (reason, error, fields) in enumerate([
                  (R_FAILED, TIMEOUTS[0], (("n", bytearray(b"1")),)),
                  (R_FAILED, TIMEOUTS[1], (("n", bytearray(b"2")),)),
                  (R_LIMIT, None, (("\\xff-raw", bytearray(b"\x00\xfe")),
                                   ("n", bytearray(b"3"))))])]
    pay = [("pay{eu}:dlq", dlq_ids["pay{eu}:dlq"][0], "pay{eu}", "audit", sources["pay{eu}"][0],
            "old", 6, 5, R_FAILED, "run-t",
            "bad currency 'XYZ' for 3f2504e0-4f89-11d3-9a0c-0305e82c3301", 1000, None,
            (("amount", bytearray(b"12.50")),))]
    assert got == sorted(orders + pay)
    for r in rows:  # x-death-time is epoch ms: the time the move ran
        assert before_ms <= r.death_time_ms <= before_ms + 60_000
        assert r.death_time == datetime.fromtimestamp(r.death_time_ms / 1000, UTC).replace(
            tzinfo=None)


@pytest.mark.slow
def test_the_job_writes_both_views_and_sums_them_up(spark, redis_server, tmp_path, capsys):
    client = redis_server.client()
    seed_causes(client)
    before = snapshot(client)
    argv = ["--set", f"redis.url={redis_server.url}", "--set", f"report.path={tmp_path / 'r'}",
            "--set", "streams.match=*", "--set", "dead_letters.warn_length=3",
            "--run-id", "20261126T000000Z-abcdef",
            "--scheduler-run-id", "scheduled__2026-11-26T00:00:00+00:00"]

    assert DeadLettersJob(lambda _: spark).main(argv) == 0

    assert snapshot(client) == before
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert (summary["status"], summary["totals"]) == ("ok", {
        "dead_letter_streams": 2, "read": 2, "empty": 0, "missing": 0, "dead_letters": 4,
        "without_metadata": 0})
    assert [(s["signature"], s["dead_letters"]) for s in summary["top_signatures"]] == [
        ("timeout after <n> ms on order <n>", 2), (None, 1),
        ("bad currency <str> for <uuid>", 1)]
    assert [(w["dead_letter_stream"], w["warning"], w["value"])
            for w in summary["dead_letter_warnings"]] == [("{orders}:dlq", "length", 3)]
    out = views_path(str(tmp_path / "r"), "20261126T000000Z-abcdef")
    by_reason = pq.read_table(f"{out}/by_reason").to_pylist()
    assert [(r["source_stream"], r["group"], r["death_reason"], r["dead_letters"])
            for r in by_reason] == [("orders", "billing", R_FAILED, 2),
                                    ("orders", "billing", R_LIMIT, 1),
                                    ("pay{eu}", "audit", R_FAILED, 1)]
    by_signature = pq.read_table(f"{out}/by_signature").to_pylist()
    assert {r["scheduler_run_id"] for r in [*by_reason, *by_signature]} == \
        {"scheduled__2026-11-26T00:00:00+00:00"} == {summary["scheduler_run_id"]}
    timeouts = by_signature[0]
    assert timeouts["example_dead_letter_id"] in [
        i.decode() for i, f in client.xrange("{orders}:dlq")
        if f.get(b"x-exception-message", b"").decode() in TIMEOUTS]
    assert timeouts["first_death_time"] <= timeouts["last_death_time"]


@pytest.mark.slow
def test_bad_dead_letter_streams_are_reported_not_fatal(spark, redis_server, tmp_path):
    client = redis_server.client()
    client.hset("{bad}:dlq", "a", "b")
    client.xadd("{foreign}:dlq", {b"\xff\xfename": b"\x80\x81", b"x-death-reason": b"mine"})
    client.xadd("{empty}:dlq", {"a": "b"}, id="5-0")
    client.xdel("{empty}:dlq", "5-0")
    settings = settings_of(redis_server, tmp_path, "streams.keys=bad,foreign,empty,missing",
                           "dead_letters.write_entries=true")
    before = snapshot(client)

    summary = run_dead_letters(spark, settings, DeadLetterSummary("t"))

    assert snapshot(client) == before
    assert summary.status == "partial"
    assert [(s["stream"], "hash" in s["reason"]) for s in summary.skipped] == [("bad", True)]
    assert [(s["stream"], s["status"], s["read"]) for s in summary.streams] == [
        ("foreign", "read", 1), ("empty", "empty", 0), ("missing", "missing", 0)]
    assert summary.totals["without_metadata"] == 1
    entries = pq.read_table(f"{summary.report_path}/entries").to_pylist()
    assert [(e["dead_letter_key"], e["source_stream"]) for e in entries] == [
        ("{foreign}:dlq", None)]
    row = read_dead_letters(spark, settings).collect()[0]
    assert (row.source_stream, row.death_reason, row.death_time) == (None, None, None)
    assert row.fields == {"\\xff\\xfename": bytearray(b"\x80\x81"),
                          "x-death-reason": bytearray(b"mine")}


@pytest.mark.slow
def test_pages_of_xrange_read_each_entry_once(spark, redis_server, tmp_path):
    client = redis_server.client()
    sizes = {f"s{i}": n for i, n in enumerate((0, 1, 4, 9, 11))}
    for stream, n in sizes.items():
        if n:
            add_entries(client, f"{{{stream}}}:dlq", n, lambda i: {b"i": str(i).encode()})
    settings = settings_of(redis_server, tmp_path, "streams.keys=" + ",".join(sizes),
                           "dead_letters.page_size=4", "spark.partitions=3")
    client.config_resetstat()

    ids = sorted((r.dead_letter_key, r.dead_letter_id)
                 for r in read_dead_letters(spark, settings).collect())

    calls = client.info("commandstats")["cmdstat_xrange"]["calls"]
    # the driver's COUNT 1 look at each of the 5, then n // 4 + 1 pages of COUNT 4 each
    assert calls == 5 + sum(n // 4 + 1 for n in sizes.values() if n)
    assert ids == sorted((f"{{{s}}}:dlq", i.decode()) for s in sizes
                         for i, _ in client.xrange(f"{{{s}}}:dlq"))


def test_config_error_is_one_line_and_exit_2(capsys, tmp_path):
    code = DeadLettersJob(lambda _: pytest.fail("no Spark for a bad config")).main(
        ["--set", "streams.keys=a", "--set", "dead_letters.warn_length=0"])
    out, err = capsys.readouterr()
    assert code == 2
    assert err.count("\n") == 1 and "dead_letters.warn_length" in err
    assert json.loads(out.strip().splitlines()[-1])["exit_code"] == 2


@pytest.mark.slow
def test_recovery_run_warns_and_health_trend_has_dead_letter_lengths(spark, redis_server,
                                                                     tmp_path):
    client = redis_server.client()
    seed_causes(client)  # 3 dead letters of orders, whose group then gets a stuck entry
    add_entries(client, "orders", 2, lambda i: {b"n": b"x"})
    stuck = deliver(client, "orders", "billing", "dead", 2)
    make_stuck(client, "orders", "billing", "dead", stuck, 3_600_000)
    old = tmp_path / "r" / "health" / "run_id=20260101T000000Z-aaaaaa"
    old.mkdir(parents=True)
    older_schema = pa.schema([f for f in arrow(HEALTH) if f.name != "dead_letter_length"])
    pq.write_table(pa.Table.from_pylist([{
        "stream": "orders", "group": "billing", "length": 1, "lag": 0, "pending": 1,
        "consumers": [], "oldest_idle_ms": 5, "deliveries": {}, "idle_ages": {}}],
        schema=older_schema), str(old / "part-0.parquet"))
    settings = settings_of(redis_server, tmp_path, "streams.keys=orders",
                           "claim.min_idle_ms=600000", "dead_letters.warn_length=3",
                           "dead_letters.warn_oldest_age_s=3600")

    summary = run(spark, settings, "20261126T010203Z-bbbbbb", dry_run=True)

    assert [(w["dead_letter_stream"], w["warning"], w["value"], w["threshold"])
            for w in summary.dead_letter_warnings] == [("{orders}:dlq", "length", 3, 3)]
    assert '"dead_letter_warnings":[{' in summary.json_line()
    trend = [(r.run_id, r.run_time, r.stream, r.pending, r.dead_letter_length)
             for r in health_trend(spark, settings).collect()]
    assert trend == [
        ("20260101T000000Z-aaaaaa", datetime(2026, 1, 1), "orders", 1, None),
        ("20261126T010203Z-bbbbbb", datetime(2026, 11, 26, 1, 2, 3), "orders", 2, 3)]
    assert client.xlen("{orders}:dlq") == 3  # never trimmed


def test_a_key_of_another_type_matched_by_the_pattern_is_no_source(redis_server, tmp_path):
    """``streams.match`` also finds keys of other types: the dead-letter read listed a string
    key as a source with a "missing" dead-letter stream (and its metrics pushed 0 for it).
    Sources are now only what Redis holds as streams (or no longer holds); the others are
    skipped with the recovery run's reason, the redrive alike, and nothing is written."""
    client = redis_server.client()
    seed_causes(client)
    client.set("orders:cache", "not a stream")
    client.hset("orders:h", "a", "b")
    settings = settings_of(redis_server, tmp_path, "streams.match=orders*")
    before = snapshot(client)

    streams, skipped = find_dead_letter_streams(settings, redis_params(settings))
    sources = sorted({src for s in streams for src in s.sources})
    assert sources == ["orders"]
    assert {client.type(src) for src in sources} == {b"stream"}  # Redis: only streams
    assert sorted((s.stream, s.reason) for s in skipped) == [
        ("orders:cache", "not a stream (type string): left alone"),
        ("orders:h", "not a stream (type hash): left alone")]
    summary = redrive(redis_server, "streams.match=orders*", "redrive.dry_run=true")
    assert [u["stream"] for u in summary.units] == ["orders"]
    assert snapshot(client) == before
