"""The whole job against real Redis 7.0, Valkey 8.1 and Redis 6.2, checked in Redis afterwards
(the exactly-once recovery also on Redis 8.0, Valkey 9.1 and Redis 8.6): the recovery and the
rerun on every server, the task retry on the two Redis versions, the letters' fields and the
runs until dead-lettered on Redis 7.0 (the same scripts and replies everywhere)."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from chispa import assert_df_equality
from pyspark.sql import SparkSession
from pyspark.sql.types import StringType, StructField, StructType
from redis import Redis

from recovery.driver.job import run
from recovery.report.run_report import read_run
from recovery.rows import Skipped
from recovery.settings.model import Settings
from tests.support.backlogs import HOUR_MS, LIVE, Seeded, age_pending, seed
from tests.support.handlers import CHECKSUM, checksum
from tests.support.invariants import dead_letters, final_states, pel
from tests.support.servers import ON_NEWEST_TOO, ON_ONE_SERVER, ON_REDIS_VERSIONS

pytestmark = pytest.mark.slow  # whole Spark runs and a Spark Connect subprocess

STREAMS = ["orders", "bin{tag}"]
GROUPS = ["billing", "audit"]
ACTION_SCHEMA = StructType([StructField(n, StringType(), False)
                            for n in ("stream", "group", "id", "action")])


def recover(spark: SparkSession, settings: Settings):
    summary = run(spark, settings)
    report = read_run(spark, settings.report.path, summary.run_id)
    return summary, report


def settings_for(make_settings: Callable[..., Settings], *extra: str) -> Settings:
    # COUNT 7: each unit's PEL (166 entries) is longer than COUNT*10, so cursors must loop.
    return make_settings("streams.match=*", "claim.count=7", "claim.max_deliveries=5",
                         "handler.path=tests.support.handlers:verify_or_fail", *extra)


def expected_states(seeded: Seeded) -> dict:
    return {k: v for k, v in seeded.state.items() if v != "gone"}


def assert_redis_matches(client: Redis, seeded: Seeded) -> None:
    states = final_states(client, expected_states(seeded))
    normalised = {k: ("pending:job" if v.startswith("pending:recovery-") else v)
                  for k, v in states.items()}
    assert normalised == expected_states(seeded)
    for stream, group, entry_id in [k for k, v in seeded.state.items() if v == "gone"]:
        assert entry_id not in pel(client, stream, group)


@ON_NEWEST_TOO
def test_recovers_every_entry_exactly_once(spark, client, make_settings):
    seeded = seed(client, STREAMS, GROUPS)
    client.set("not-a-stream", "x")
    summary, report = recover(spark, settings_for(make_settings))

    assert_redis_matches(client, seeded)
    expected = spark.createDataFrame(
        [(*k, a) for k, a in seeded.action.items()], ACTION_SCHEMA)
    actual = report.select("stream", "group", "id", "action")
    assert_df_equality(actual, expected, ignore_row_order=True, ignore_nullable=True)
    assert summary.skipped == [Skipped("not-a-stream", None,
                                       "not a stream (type string): left alone")]
    assert summary.totals["reprocessed"] == 120 * 4


@ON_ONE_SERVER  # dead-lettering on every server: test_recovers_every_entry_exactly_once
def test_dead_letters_keep_fields_verbatim_with_metadata(spark, client, make_settings):
    seed(client, ["orders"], ["billing"])
    summary, _ = recover(spark, settings_for(make_settings))
    letters = dead_letters(client, "orders")
    assert len(letters) == 12 + 6
    for f in letters:
        original = [(k, v) for k, v in f.items() if not k.startswith(b"x-")]
        assert f[CHECKSUM] == checksum(original)  # non-UTF-8 names and values survived
        assert f[b"x-original-stream"] == b"orders"
        assert f[b"x-original-group"] == b"billing"
        assert f[b"x-original-consumer"] == b"worker-dead"
        assert f[b"x-delivery-limit"] == b"5"
        assert f[b"x-run-id"] == summary.run_id.encode()
        assert int(f[b"x-idle-ms"]) >= 3_600_000
        assert int(f[b"x-death-time"]) > 1_700_000_000_000
        if f[b"kind"] == b"poison":
            assert f[b"x-delivery-count"] == b"10"
            assert f[b"x-death-reason"] == b"max-deliveries-exceeded"
            assert b"x-exception-message" not in f
        else:
            assert f[b"x-delivery-count"] == b"5"
            assert f[b"x-death-reason"] == b"handler-failed-at-limit"
            assert f[b"x-exception-message"].startswith(b"refused ")


@ON_ONE_SERVER  # a second run on every server: test_rerun_after_complete_run_changes_nothing
def test_second_run_claims_failures_again_until_dead_lettered(spark, client, make_settings):
    seeded = seed(client, ["orders"], ["billing"])
    failing = [k for k, a in seeded.action.items() if a == "failed"]
    settings = settings_for(make_settings)
    counts, run_rows = [], {}
    for _ in range(4):
        summary, _ = recover(spark, settings)
        run_rows[summary.run_id] = sum(summary.totals.values())
        age_pending(client, "orders", "billing", [k[2] for k in failing], HOUR_MS)
        owners = pel(client, "orders", "billing")
        counts.append({owners[k[2]].delivery_count for k in failing if k[2] in owners})
    # Claimed at 2, 3, 4 deliveries and failed; the 4th run claims at 5 = the limit: DLQ.
    assert counts == [{2}, {3}, {4}, set()]
    states = final_states(client, {k: None for k in failing})
    assert set(states.values()) == {"dead_lettered"}
    assert {k[2] for k in seeded.state if seeded.state[k] == f"pending:{LIVE}"} <= set(
        pel(client, "orders", "billing"))
    # The report's base directory reads as every run's rows, each with its run id (from the
    # files' path: the rows themselves do not repeat it).
    runs = spark.read.parquet(f"{settings.report.path}/entries").groupBy("run_id").count()
    assert {r["run_id"]: r["count"] for r in runs.collect()} == run_rows


def test_rerun_after_complete_run_changes_nothing(spark, client, make_settings):
    seeded = seed(client, ["orders"], ["billing"])
    settings = settings_for(make_settings)
    recover(spark, settings)
    summary, report = recover(spark, settings)
    assert report.count() == 0  # failures are not idle yet; nothing else is pending
    assert summary.totals["dead_lettered"] == 0
    assert_redis_matches(client, seeded)
    consumers = {c["name"] for c in client.xinfo_consumers("orders", "billing")}
    assert not any(c.startswith(b"recovery-") and c.decode().find(summary.run_id) >= 0
                   for c in consumers), "the empty job consumer of the 2nd run was removed"


@pytest.mark.parametrize("journal", ["recovery:journal:", ""])
@ON_REDIS_VERSIONS  # a fault trial: 6.2's claim replies and 7.0's (Valkey answers as 7.2)
def test_task_retry_during_claim_loses_nothing(spark, client, make_settings, faults, journal):
    """local[2,3]: the task fails after its 2nd XAUTOCLAIM step (14 entries claimed), before
    any hand-over: with the claim journal (one pass) the two small steps were still being
    gathered (and journaled); without it the claim is materialised first. Either way the
    retry claims as the same consumer and the PEL read takes those 14 back. (The fault comes
    before the deleted entries are reached: a failed attempt that drops deleted IDs from the
    PEL leaves nothing a retry could report, see README "Guarantees".)"""
    seeded = seed(client, ["orders"], ["billing"])
    faults("claim 2 0")
    _, report = recover(spark, settings_for(make_settings, f"claim.journal_prefix={journal}"))
    assert_redis_matches(client, seeded)
    expected = spark.createDataFrame(
        [(*k, a) for k, a in seeded.action.items()], ACTION_SCHEMA)
    assert_df_equality(report.select("stream", "group", "id", "action"), expected,
                       ignore_row_order=True, ignore_nullable=True)
    taken_back = report.where("previous_consumer IS NULL AND action = 'reprocessed'").count()
    assert taken_back == 14
    assert client.keys("recovery:journal:*") == []  # the run's journals are deleted


@pytest.mark.xdist_group("connect")
def test_runs_under_spark_connect(redis_server, tmp_path, connect_server):
    """The job as a client of the tests' local Spark Connect server (DataFrame APIs only)."""
    client = redis_server.client()
    seeded = seed(client, ["orders"], ["billing"])
    proc = connect_server.run(redis_server.url, tmp_path / "r")
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert summary["totals"]["reprocessed"] == 120
    assert_redis_matches(client, seeded)
