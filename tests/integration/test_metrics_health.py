"""The state after a run, as the metrics, the JSON summary and the health snapshots show it
(recovery.report.after_run, recovery.metrics.families, recovery.driver.discovery's groups
with nothing pending), compared with Redis itself after real runs against a real
Pushgateway: a selected group with nothing pending appears with pending 0 (a run that finds
nothing pending anywhere still writes its snapshot, so ``health_trend`` has no gaps); the
PEL's delivery-count buckets; the oldest dead letter's age (XRANGE - + COUNT 1); the job's
own consumers left holding entries (XINFO CONSUMERS)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from redis import Redis

from recovery.dead_letters.trend import health_trend
from recovery.jobs.redrive import RedriveJob
from recovery.metrics.families import PREFIX
from recovery.settings.model import load_settings
from recovery.testing.backlog import add_entries, create_group
from recovery.testing.local_redis import LocalServer
from tests.support.backlogs import seed
from tests.support.fault_tools import job_args, json_summary, run_in_process
from tests.support.pushgateway import LocalPushgateway, pushed

pytestmark = pytest.mark.slow  # Spark jobs
HOUR_MS = 3_600_000
HANDLER = "handler.path=tests.support.handlers:verify_or_fail"  # fails the "fail" kind


def oldest_age_now_s(client: Redis, key: str) -> float:
    """Seconds since the first entry of `key` was added, from its ID (XRANGE - + COUNT 1)."""
    [(entry_id, _)] = client.xrange(key, "-", "+", count=1)
    return time.time() - int(entry_id.decode().partition("-")[0]) / 1000


def job_consumers_left(client: Redis, stream: str, group: str) -> list[int]:
    """The pending counts of the job's consumers (``recovery-...``) that still hold entries."""
    return [c["pending"] for c in client.xinfo_consumers(stream, group)
            if c["name"].decode().startswith("recovery-") and c["pending"]]


def test_the_state_after_the_run_as_redis_shows_it(spark: SparkSession,
                                                   redis_server: LocalServer,
                                                   tmp_path: Path) -> None:
    client: Redis = redis_server.client()
    seed(client, ["mh-busy"], ["g1"])
    dlq = "{mh-busy}:dlq"
    client.xadd(dlq, {"n": "old"}, id=f"{int(time.time() * 1000) - HOUR_MS}-0")
    create_group(client, "mh-quiet", "g1")  # 3 entries not delivered: lag 3, nothing pending
    add_entries(client, "mh-quiet", 3, lambda i: {"n": str(i)})
    with LocalPushgateway() as gateway:
        args = job_args(redis_server.url, tmp_path, ["mh-busy", "mh-quiet"], HANDLER,
                        f"metrics.pushgateway_url={gateway.url}")
        result = run_in_process(spark, args)
        assert result.code == 0 and result.summary["metrics"]["pushed"], result.stderr[-3000:]
        values = {name: pushed(gateway, PREFIX + name) for name in (
            "pending_entries", "oldest_idle_seconds", "pel_delivery_entries",
            "dead_letter_oldest_age_seconds", "job_consumers", "job_consumer_pending_entries")}
    summary, busy, quiet = result.summary, "group=g1,stream=mh-busy", "group=g1,stream=mh-quiet"
    assert client.xpending("mh-quiet", "g1")["pending"] == 0
    assert values["pending_entries"] == {busy: client.xpending("mh-busy", "g1")["pending"],
                                         quiet: 0}
    assert values["oldest_idle_seconds"][quiet] == 0
    assert summary["health"]["units"] == 2 and summary["health_after"]["units"] == 2
    snapshot = {r["stream"]: r.asDict() for r in spark.read.parquet(summary["health_path"])
                .collect()}
    assert snapshot["mh-quiet"]["pending"] == 0 and snapshot["mh-quiet"]["lag"] == 3
    buckets = {k.split(",")[0]: v for k, v in values["pel_delivery_entries"].items()
               if k.endswith(",stream=mh-busy")}
    assert buckets == {f"bucket={b}": n for b, n in snapshot["mh-busy"]["deliveries"].items()}
    assert sum(buckets.values()) == snapshot["mh-busy"]["pending"] > 0
    age = values["dead_letter_oldest_age_seconds"]["stream=mh-busy"]
    assert age == pytest.approx(oldest_age_now_s(client, dlq), abs=60) and age > 3000
    left = job_consumers_left(client, "mh-busy", "g1")
    assert left and values["job_consumers"] == {busy: len(left), quiet: 0}
    assert values["job_consumer_pending_entries"] == {busy: sum(left), quiet: 0}

    # A run that finds nothing pending anywhere: a snapshot all the same, and the trend
    # holds the quiet group's row of both runs.
    calm = run_in_process(spark, job_args(redis_server.url, tmp_path, ["mh-quiet"], HANDLER))
    assert calm.code == 0 and calm.summary["health_path"], calm.summary
    assert calm.summary["health"]["units"] == 1 and calm.summary["health"]["pending"] == 0
    assert calm.summary["health_after"]["pending"] == 0
    settings = load_settings(None, [f"report.path={tmp_path}", "streams.keys=mh-quiet"])
    trend = health_trend(spark, settings).where("stream = 'mh-quiet'").collect()
    assert sorted(r["run_id"] for r in trend) == sorted(
        [summary["run_id"], calm.summary["run_id"]])
    assert {r["pending"] for r in trend} == {0}


def test_the_redrive_pushes_the_oldest_dead_letters_age(spark: SparkSession,
                                                        redis_server: LocalServer,
                                                        tmp_path: Path) -> None:
    """A redrive that leaves dead letters behind (``redrive.limit``) pushes the age of the
    oldest one left, as XRANGE shows it."""
    client: Redis = redis_server.client()
    seed(client, ["mh-re"], ["g1"])
    dlq = "{mh-re}:dlq"
    with LocalPushgateway() as gateway:
        metrics = f"metrics.pushgateway_url={gateway.url}"
        recovered = run_in_process(spark, job_args(redis_server.url, tmp_path, ["mh-re"],
                                                   HANDLER, metrics))
        assert recovered.code == 0 and client.xlen(dlq) == 18
        sets = [f"redis.url={redis_server.url}", "streams.keys=mh-re", "redrive.limit=5",
                f"report.path={tmp_path}", metrics]
        code, redriven = json_summary(lambda: RedriveJob().main([a for s in sets
                                                                 for a in ("--set", s)]))
        assert code == 0 and redriven["metrics"]["pushed"], redriven
        ages = pushed(gateway, PREFIX + "dead_letter_oldest_age_seconds", "redrive")
    assert client.xlen(dlq) > 0
    assert list(ages) == ["stream=mh-re"]
    assert ages["stream=mh-re"] == pytest.approx(oldest_age_now_s(client, dlq), abs=30)
