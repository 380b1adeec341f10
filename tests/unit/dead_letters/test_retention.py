"""Opt-in retention of dead-letter streams (recovery.dead_letters.retention, the commands of
recovery.redis_io.trim): on Redis 7.0, Valkey 8.1 and Redis 6.2, exactly the letters past a
limit are gone (XRANGE before and after), nothing else; the floor holds back a length cut and
refuses an age below it; the dead-letter job reports every trim in its JSON summary.

Letters are written with explicit IDs whose time part sets their age on the server's clock.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
import redis

from recovery.dead_letters.retention import apply_retention, cut_of
from recovery.dead_letters.run import find_dead_letter_streams
from recovery.errors import ConfigError
from recovery.jobs.dead_letters import DeadLettersJob
from recovery.redis_io.trim import LetterScope, nth_id, server_time_ms, trim_letters
from recovery.settings.model import Settings, load_settings, redis_params
from recovery.testing.backlog import create_group
from recovery.testing.local_redis import LocalServer
from tests.support.redrive_tools import dead_letter

DLQ, OTHER = "{orders}:dlq", "pay{eu}:dlq"


def settings_of(server: LocalServer, tmp_path: Path, *overrides: str) -> Settings:
    return load_settings(None, [f"redis.url={server.url}", f"report.path={tmp_path / 'r'}",
                                "streams.keys=orders,pay{eu}", *overrides])


def source_of(key: str) -> str:
    """The source whose dead-letter stream `key` is (``{orders}:dlq`` -> ``orders``)."""
    source = key.removesuffix(":dlq")
    return source[1:-1] if source.startswith("{") and source.endswith("}") else source


def letters_aged(client: redis.Redis, key: str, ages_s: list[int]) -> list[str]:
    """One letter of `key`'s source per age (seconds before the server's now, oldest first),
    IDs ``<ms>-0``, with the metadata block that makes it a letter (retention trims only
    those)."""
    now = server_time_ms(client)
    ids = [f"{now - age * 1000}-0" for age in ages_s]
    for i, entry_id in enumerate(ids):
        client.xadd(key, {b"n": str(i).encode(), b"x-original-stream": source_of(key).encode(),
                          b"x-death-reason": b"handler-rejected"}, id=entry_id)
    return ids


def xrange_ids(client: redis.Redis, key: str) -> list[str]:
    return [i.decode() for i, _ in client.xrange(key)]


def retain(server: LocalServer, tmp_path: Path, *overrides: str) -> dict:
    settings = settings_of(server, tmp_path, *overrides)
    streams, _ = find_dead_letter_streams(settings, redis_params(settings))
    report = apply_retention(redis_params(settings), streams, settings.dead_letters)
    assert report is not None
    return report


def test_max_age_trims_exactly_the_letters_older_than_it(server, tmp_path):
    client = server.client()
    ids = letters_aged(client, DLQ, [5000, 4000, 3000, 100, 10])
    young = letters_aged(client, OTHER, [3000, 10])
    before_other = client.xrange(OTHER)
    before = client.xrange(DLQ)

    report = retain(server, tmp_path, "dead_letters.max_age_s=3500")

    assert client.xrange(DLQ) == before[2:]
    assert client.xrange(OTHER) == before_other and xrange_ids(client, OTHER) == young
    assert (report["trimmed"], report["trimmed_streams"]) == (2, 1)
    rows = {r["dead_letter_stream"]: r for r in report["streams"]}
    assert (rows[DLQ]["trimmed"], rows[DLQ]["last_trimmed_id"], rows[DLQ]["by"]) == (
        2, ids[1], ["max_age_s"])
    assert rows[OTHER]["trimmed"] == 0 and rows[OTHER]["last_trimmed_id"] is None


@pytest.mark.parametrize("max_length", [1, 3, 7, 9, 10, 12])
def test_max_length_keeps_exactly_the_newest(server, tmp_path, max_length):
    client = server.client()
    letters_aged(client, DLQ, list(range(1000, 0, -100)))  # 10 letters
    before = client.xrange(DLQ)

    report = retain(server, tmp_path, f"dead_letters.max_length={max_length}",
                    "dead_letters.page_size=2")  # both ends of the stream, several pages

    assert client.xrange(DLQ) == before[-max_length:]
    trimmed = max(0, len(before) - max_length)
    [row] = report["streams"]
    assert row["trimmed"] == trimmed == report["trimmed"]
    assert row["last_trimmed_id"] == (before[trimmed - 1][0].decode() if trimmed else None)


@pytest.mark.parametrize("limit", ["dead_letters.max_age_s=3500", "dead_letters.max_length=2"])
def test_a_dry_run_counts_what_it_would_trim_and_trims_nothing(server, tmp_path, limit):
    client = server.client()
    letters_aged(client, DLQ, [5000, 4000, 3000, 100, 10])
    before = client.xrange(DLQ)

    dry = retain(server, tmp_path, limit, "dead_letters.dry_run=true",
                 "dead_letters.page_size=2")  # the count goes over several pages

    assert client.xrange(DLQ) == before  # nothing trimmed
    [row] = [r for r in dry["streams"] if r["dead_letter_stream"] == DLQ]
    assert (dry["dry_run"], dry["trimmed"], row["trimmed"]) == (True, 0, 0)
    real = retain(server, tmp_path, limit)
    [done] = [r for r in real["streams"] if r["dead_letter_stream"] == DLQ]
    assert row["would_trim"] == dry["would_trim"] == done["trimmed"] == len(before) - len(
        client.xrange(DLQ)) > 0
    assert row["last_trimmed_id"] == done["last_trimmed_id"]  # the cut of an age moves on


def test_the_later_cut_of_age_and_length_applies(server, tmp_path):
    client = server.client()
    letters_aged(client, DLQ, [900, 800, 700, 600, 500, 50, 40])
    before = client.xrange(DLQ)

    by_age = retain(server, tmp_path, "dead_letters.max_age_s=650", "dead_letters.max_length=6")
    assert client.xrange(DLQ) == before[3:] and by_age["streams"][0]["by"] == ["max_age_s"]
    by_length = retain(server, tmp_path, "dead_letters.max_age_s=650",
                       "dead_letters.max_length=2")
    assert client.xrange(DLQ) == before[-2:] and by_length["streams"][0]["by"] == ["max_length"]


def test_the_floor_holds_a_length_cut_back_with_a_warning(server, tmp_path, caplog):
    client = server.client()
    old = letters_aged(client, DLQ, [7200, 7100, 7000])
    young = letters_aged(client, DLQ, [50, 40, 30, 20])
    before = client.xrange(DLQ)

    with caplog.at_level(logging.WARNING, "recovery"):
        report = retain(server, tmp_path, "dead_letters.max_length=2",
                        "dead_letters.retention_floor_s=3600")

    assert xrange_ids(client, DLQ) == young and client.xrange(DLQ) == before[3:]
    [row] = report["streams"]
    assert (row["trimmed"], row["last_trimmed_id"], row["held_by_floor"]) == (3, old[-1], True)
    assert any("retention_floor_s" in r.message and r.levelno == logging.WARNING
               for r in caplog.records)
    # Only young letters left: the floor keeps every one of them, however many.
    again = retain(server, tmp_path, "dead_letters.max_length=1",
                   "dead_letters.retention_floor_s=3600")
    assert xrange_ids(client, DLQ) == young and again["trimmed"] == 0


def test_a_letter_added_after_the_cut_is_never_trimmed(redis_server, tmp_path):
    client = redis_server.client()
    letters_aged(client, DLQ, [500, 400, 300, 200])
    settings = settings_of(redis_server, tmp_path, "dead_letters.max_length=2")
    cut = cut_of(client, DLQ, settings.dead_letters, server_time_ms(client))
    assert cut is not None
    late = [client.xadd(DLQ, {b"n": b"late"}).decode() for _ in range(3)]
    before = xrange_ids(client, DLQ)
    kept = before[2:]

    step = trim_letters(client, DLQ, "-", cut.below, LetterScope(["orders"]), 1000,
                        dry_run=False)
    assert (step.passed, step.why, step.bound) == (2, "cut", cut.below)
    assert step.last == before[1]
    assert xrange_ids(client, DLQ) == kept and kept[-3:] == late


def test_nth_id_counts_from_either_end(redis_server):
    client = redis_server.client()
    ids = letters_aged(client, DLQ, [50, 40, 30, 20, 10])
    assert [nth_id(client, DLQ, n, newest=False, page=2) for n in (1, 3, 5, 6)] == [
        ids[0], ids[2], ids[4], None]
    assert [nth_id(client, DLQ, n, newest=True, page=2) for n in (1, 3, 5, 6)] == [
        ids[4], ids[2], ids[0], None]


def test_retention_off_by_default_sends_nothing(redis_server, tmp_path):
    client = redis_server.client()
    letters_aged(client, DLQ, [10**6, 10])
    before = client.xrange(DLQ)
    settings = settings_of(redis_server, tmp_path)
    streams, _ = find_dead_letter_streams(settings, redis_params(settings))
    assert apply_retention(redis_params(settings), streams, settings.dead_letters) is None
    assert client.xrange(DLQ) == before


def test_an_age_below_the_floor_is_refused_before_redis(redis_server, tmp_path, capsys):
    client = redis_server.client()
    letters_aged(client, DLQ, [10**6, 10])
    before = client.xrange(DLQ)
    with pytest.raises(ConfigError, match="retention_floor_s"):
        settings_of(redis_server, tmp_path, "dead_letters.max_age_s=60",
                    "dead_letters.retention_floor_s=3600")
    argv = ["--set", f"redis.url={redis_server.url}", "--set", "streams.keys=orders",
            "--set", "dead_letters.max_age_s=60", "--set", "dead_letters.retention_floor_s=3600"]

    def no_spark(_settings):
        raise AssertionError("Spark must not start")

    assert DeadLettersJob(no_spark).main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "max_age_s" in err[0] and "retention_floor_s" in err[0], err
    assert client.xrange(DLQ) == before


@pytest.mark.slow
def test_the_job_trims_after_its_read_and_reports_each_trim(spark, server, tmp_path, capsys):
    client = server.client()
    create_group(client, "orders", "billing")
    dead_letter(client, "orders", "billing", [{b"n": str(i).encode()} for i in range(5)],
                ["handler-rejected"] * 5, ["Unparseable: bad"] * 5)
    before = client.xrange(DLQ)
    argv = ["--set", f"redis.url={server.url}", "--set", f"report.path={tmp_path / 'r'}",
            "--set", "streams.keys=orders", "--set", "dead_letters.max_length=2",
            "--run-id", "20261126T000000Z-abcdef"]

    assert DeadLettersJob(lambda _: spark).main([*argv, "--dry-run"]) == 0
    dry = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert client.xrange(DLQ) == before and dry["dry_run"] is True
    assert (dry["retention"]["trimmed"], dry["retention"]["would_trim"]) == (0, 3)

    assert DeadLettersJob(lambda _: spark).main(argv) == 0

    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["dry_run"] is False
    assert client.xrange(DLQ) == before[-2:]
    assert summary["totals"]["dead_letters"] == 5  # read (and in the views) before the trim
    retention = summary["retention"]
    assert (retention["max_length"], retention["trimmed"], retention["trimmed_streams"]) == (
        2, 3, 1)
    assert retention["streams"] == [{
        "stream": "orders", "dead_letter_stream": DLQ, "trimmed": 3, "would_trim": 3,
        "last_trimmed_id": before[2][0].decode(), "kept_from_id": before[3][0].decode(),
        "by": ["max_length"], "held_by_floor": False, "stopped_at_id": None,
        "stopped_because": None, "stopped_source": None}]
    assert client.xpending("orders", "billing")["pending"] == 0


def test_retention_on_a_cluster_trims_each_stream_on_its_node(redis_cluster, tmp_path):
    """On a Redis Cluster the ages count from the earliest node clock (TIME answers per node)
    and each stream is read and trimmed on its own primary."""
    redis_cluster.wait_healthy()
    redis_cluster.flush()
    client = redis_cluster.client()
    keys = ["orders", "pay{eu}", "audit"]
    dlqs = ["{orders}:dlq", "pay{eu}:dlq", "{audit}:dlq"]
    assert len({client.keyslot(k) for k in dlqs}) == 3
    before = {}
    for dlq in dlqs:
        letters_aged(client, dlq, [900, 800, 700, 10])
        before[dlq] = client.xrange(dlq)
    settings = load_settings(None, [f"redis.url={redis_cluster.url}",
                                    f"report.path={tmp_path / 'r'}",
                                    "streams.keys=" + ",".join(keys),
                                    "dead_letters.max_age_s=750", "dead_letters.max_length=3"])
    streams, _ = find_dead_letter_streams(settings, redis_params(settings))
    report = apply_retention(redis_params(settings), streams, settings.dead_letters)
    assert report is not None and report["trimmed"] == 6
    for dlq in dlqs:
        assert client.xrange(dlq) == before[dlq][2:]
