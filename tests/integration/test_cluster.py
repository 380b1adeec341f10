"""The job on a real Redis Cluster: three primaries, a replica, streams on every primary.

The same end-to-end invariants as on one server (``tests/support/backlogs.py``,
``tests/support/invariants.py`` with a cluster client), keys that cannot have a same-slot
dead-letter stream reported per key, and a failover (CLUSTER FAILOVER on the replica) in the
middle of a run.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator

import pytest
from chispa import assert_df_equality
from pyspark.sql.types import StringType, StructField, StructType
from redis.cluster import RedisCluster

from recovery.driver.discovery import WorkUnit, assign, clean_up_consumers, discover
from recovery.driver.job import run
from recovery.errors import ConfigError, RecoveryError
from recovery.redis_io.cluster import StreamCluster, groups_by_node
from recovery.redis_io.dlq_names import dead_letter_key, requeue_key
from recovery.redis_io.error_codes import unit_vanished
from recovery.redis_io.redis_conn import RedisConn, connect
from recovery.report.run_report import read_run
from recovery.settings.model import load_settings, redis_params
from tests.support.backlogs import HOUR_MS, Seeded, age_pending, seed
from tests.support.cluster_fixtures import LocalCluster, keys_on_every_primary
from tests.support.invariants import final_states, pel

GROUPS = ["billing", "audit"]
ACTION_SCHEMA = StructType([StructField(n, StringType(), False)
                            for n in ("stream", "group", "id", "action")])
NO_SAME_SLOT_NAME = "bad}name"


@pytest.fixture
def cluster(redis_cluster: LocalCluster) -> LocalCluster:
    return redis_cluster


@pytest.fixture
def rc(cluster: LocalCluster) -> Iterator[RedisCluster]:
    cluster.wait_healthy()
    cluster.flush()
    client = cluster.client()
    yield client
    client.close()


def cluster_settings(cluster: LocalCluster, tmp_path, *extra: str):
    return load_settings(None, [
        f"redis.url={cluster.url}", f"report.path={tmp_path / 'reports'}",
        "streams.match=*", "claim.count=7", "claim.min_idle_ms=600000",
        "claim.max_deliveries=5", "handler.path=tests.support.handlers:verify_or_fail",
        "spark.partitions=4", *extra])


def seed_everywhere(rc: RedisCluster) -> tuple[list[str], Seeded]:
    """Streams on every primary, hash-tagged ones included, plus keys to skip."""
    streams = [*keys_on_every_primary(rc, 2), "orders{eu}", "{orders}us"]
    seeded = seed(rc, streams, GROUPS)
    rc.set("not-a-stream", "x")
    rc.xadd(NO_SAME_SLOT_NAME, {"a": "1"})
    rc.xgroup_create(NO_SAME_SLOT_NAME, "billing", id="0")
    rc.xreadgroup("billing", "worker-dead", {NO_SAME_SLOT_NAME: ">"})
    return streams, seeded


def expected_states(seeded: Seeded) -> dict:
    return {k: v for k, v in seeded.state.items() if v != "gone"}


def normalised_states(rc: RedisCluster, seeded: Seeded) -> dict:
    states = final_states(rc, expected_states(seeded))
    return {k: ("pending:job" if v.startswith("pending:recovery-") else v)
            for k, v in states.items()}


def test_client_is_a_cluster_client_and_units_know_their_primary(cluster, rc, tmp_path):
    streams, _ = seed_everywhere(rc)
    settings = cluster_settings(cluster, tmp_path)
    conn = RedisConn.open(redis_params(settings))
    assert isinstance(conn.client, StreamCluster)  # redis.cluster = "auto" found the cluster
    units, skipped = discover(conn, settings)
    assert {u.stream for u in units} == set(streams)
    assert {u.node for u in units} == {n.name for n in rc.get_primaries()}
    for unit in units:
        assert unit.node == rc.get_node_from_key(unit.stream).name
    parts = assign(units, 4, "recovery", "r")
    nodes_per_part = {p: {rc.get_node_from_key(u.stream).name for u, q in parts if q == p}
                      for p in {q for _, q in parts}}
    assert len(nodes_per_part) == 4 and all(len(n) == 1 for n in nodes_per_part.values())
    assert {s.stream for s in skipped} == {"not-a-stream", NO_SAME_SLOT_NAME}
    conn.close()


def test_the_tests_of_the_cluster_share_one_worker(redis_cluster, request):
    """Under ``make test`` (``--dist loadgroup``) every test that uses the cluster is in the
    group ``cluster`` (tests/conftest.py), so one worker starts it; before, the group was added
    after pytest-xdist had read the groups, and each worker started a cluster of its own."""
    if request.config.getoption("dist", "no") == "loadgroup":
        assert request.node.nodeid.endswith("@cluster"), request.node.nodeid


@pytest.mark.parametrize(("partitions", "parts"), [(1, [(["a1", "a2", "b1", "c1"], 1)]),
                                                   (2, [(["a1", "a2"], 1), (["b1", "c1"], 1)]),
                                                   (4, [(["a1", "a2"], 2), (["b1"], 1),
                                                        (["c1"], 1)]),
                                                   (9, [(["a1", "a2"], 2), (["b1"], 1),
                                                        (["c1"], 1)])])
def test_groups_by_node_keeps_each_part_on_one_node(partitions, parts):
    sizes = {"a1": 50, "a2": 40, "b1": 30, "c1": 20}
    grouped = groups_by_node(sorted(sizes), partitions, lambda k: k[0], sizes.__getitem__)
    assert [(sorted(g), n) for g, n in grouped] == parts


def test_assign_on_one_server_is_unchanged():
    units = [WorkUnit(f"s{i}", "g", 10 * i) for i in range(1, 6)]
    parts = assign(units, 2, "p", "r")
    assert {p for _, p in parts} == {0, 1}
    load = {p: sum(u.pending for u in units for a, q in parts if q == p and a.stream == u.stream)
            for p in (0, 1)}
    assert sorted(load.values()) == [70, 80]


@pytest.mark.slow
@pytest.mark.parametrize("schedule", [(), ("claim.backoff_factor=1.1",)],
                         ids=["xautoclaim", "backoff"])
def test_recovers_every_entry_exactly_once_on_a_cluster(spark, cluster, rc, tmp_path, schedule):
    """Under a gentle backoff schedule (every entry idle an hour is due) the claim script
    runs on each stream's primary, loaded there on first use."""
    streams, seeded = seed_everywhere(rc)
    settings = cluster_settings(cluster, tmp_path, *schedule)
    summary = run(spark, settings)
    assert (summary.backoff is not None) is bool(schedule) and summary.not_due == 0

    assert normalised_states(rc, seeded) == expected_states(seeded)
    for stream, group, entry_id in [k for k, v in seeded.state.items() if v == "gone"]:
        assert entry_id not in pel(rc, stream, group)
    report = read_run(spark, settings.report.path, summary.run_id)
    expected = spark.createDataFrame([(*k, a) for k, a in seeded.action.items()], ACTION_SCHEMA)
    assert_df_equality(report.select("stream", "group", "id", "action"), expected,
                       ignore_row_order=True, ignore_nullable=True)
    for stream in streams:  # each dead-letter stream lives on its source's primary
        dlq = dead_letter_key(stream, ":dlq")
        assert rc.xlen(dlq) == 2 * (12 + 6)
        assert rc.get_node_from_key(dlq) == rc.get_node_from_key(stream)
    reasons = {s["stream"]: s["reason"] for s in summary.skipped}
    assert "no dead-letter name can share its hash slot" in reasons[NO_SAME_SLOT_NAME]
    assert pel(rc, NO_SAME_SLOT_NAME, "billing")  # left alone, still pending
    assert summary.status == "partial"
    assert summary.totals["reprocessed"] == 120 * len(streams) * len(GROUPS)


@pytest.mark.slow
def test_consumer_clean_up_reads_each_groups_summary_once_on_its_primary(cluster, rc, tmp_path):
    """On a Redis Cluster (a script call per group, on its stream's primary): each group's
    summary as XPENDING shows it, however many of its consumers are targets; the empty job
    consumers go, an owner and the application's consumer stay; a vanished group costs only
    itself."""
    streams = keys_on_every_primary(rc, 1)
    for stream in streams:
        rc.xgroup_create(stream, "g", id="0", mkstream=True)
        rc.xadd(stream, {"f": "v"})
        rc.xreadgroup("g", "recovery-old-0", {stream: ">"})  # an earlier run's, owning 1
        for consumer in ("recovery-run-0", "app"):
            rc.xgroup_createconsumer(stream, "g", consumer)
    rc.xgroup_destroy(streams[0], "g")
    params = redis_params(cluster_settings(cluster, tmp_path))
    with RedisConn.open(params) as conn:
        cleaned = clean_up_consumers(
            conn, [(s, "g", c) for s in streams for c in ("recovery-run-0", "recovery-old-0")])
    assert cleaned.removed == len(streams) - 1
    assert unit_vanished(cleaned.summaries[(streams[0], "g")])  # type: ignore[arg-type]
    for stream in streams[1:]:
        names = {c["name"] for c in rc.xinfo_consumers(stream, "g")}
        assert names == {b"recovery-old-0", b"app"}
        total, _first, _last, rows = cleaned.summaries[(stream, "g")]  # type: ignore[misc]
        pending = rc.xpending(stream, "g")
        assert total == pending["pending"] == 1
        assert [(name, int(count)) for name, count in rows] == [
            (c["name"], c["pending"]) for c in pending["consumers"]]


class FailoverDuringRun:
    """Fires CLUSTER FAILOVER on the replica once the run has claimed on that shard."""

    def __init__(self, cluster: LocalCluster, watched: list[str]) -> None:
        self.cluster = cluster
        self.primary, self.replica = cluster.replicated_shard()
        self.watched = watched
        self.fired_at: float | None = None
        self.done_at: float | None = None
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        client = self.primary.client()
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and not self._job_claimed(client):
            time.sleep(0.02)
        self.fired_at = time.monotonic()
        self.replica.client().execute_command("CLUSTER FAILOVER")
        while self.replica.client().info("replication")["role"] != "master":
            time.sleep(0.05)
        self.done_at = time.monotonic()

    def _job_claimed(self, client) -> bool:
        for stream in self.watched:
            for group in GROUPS:
                consumers = client.xinfo_consumers(stream, group)
                if any(c["name"].startswith(b"recovery-") for c in consumers):
                    return True
        return False

    def join(self) -> None:
        self._thread.join(timeout=300)


@pytest.mark.slow
def test_failover_during_a_run_loses_nothing(spark, cluster, rc, tmp_path):
    streams, seeded = seed_everywhere(rc)
    shard = cluster.replicated_shard()[0]
    on_shard = [s for s in streams if rc.get_node_from_key(s).port == shard.port]
    settings = cluster_settings(cluster, tmp_path)
    failover = FailoverDuringRun(cluster, on_shard)
    try:
        first = run(spark, settings)
        outcome = first.status
    except RecoveryError as exc:  # allowed: a clear, one-line error
        outcome = f"error: {exc}"
        assert "\n" not in str(exc)
    finished_at = time.monotonic()
    failover.join()
    print(f"first run: {outcome}; failover fired {finished_at - failover.fired_at:.1f} s "
          f"before the run ended")
    assert failover.fired_at is not None and failover.fired_at < finished_at, "not during the run"
    assert cluster.replicated_shard()[0] is failover.replica, "no failover happened"

    # Time passes (the job's leftovers become idle), then the next run finishes the work.
    for stream, group in {(k[0], k[1]) for k in seeded.state}:
        mine = [i for i, p in pel(rc, stream, group).items()
                if p.consumer.startswith("recovery-")]
        age_pending(rc, stream, group, mine, HOUR_MS)
    run(spark, settings)
    assert normalised_states(rc, seeded) == expected_states(seeded), outcome


def test_cluster_false_against_a_cluster_fails_clearly(cluster, rc, tmp_path):
    streams, _ = seed_everywhere(rc)
    settings = cluster_settings(cluster, tmp_path, "redis.cluster=false",
                                "streams.keys=" + ",".join(streams))
    params = redis_params(settings)
    conn = RedisConn.open(params)
    assert not isinstance(conn.client, RedisCluster)
    with pytest.raises(RecoveryError, match=r"redirected a key to another node \(MOVED "
                                            r"\d+ 127\.0\.0\.1:\d+\): .*redis\.cluster"):
        discover(conn, settings)


@pytest.mark.parametrize("mode", ["auto", "true"])
def test_a_database_other_than_0_on_a_cluster_is_a_config_error(mode, cluster, rc, tmp_path):
    settings = cluster_settings(cluster, tmp_path, f"redis.cluster={mode}",
                                f"redis.url={cluster.url.removesuffix('/0')}/3")
    with pytest.raises(ConfigError, match="only database 0: end the URL with /0"):
        connect(redis_params(settings))


@pytest.mark.slow
def test_requeue_on_a_cluster_keeps_each_copy_in_its_sources_slot(spark, cluster, rc,
                                                                  tmp_path):
    """Streams on every primary, two groups each: copies go to per-group retry streams named
    in their source's hash slot (the script's keys must share one), one copy per entry."""
    streams, _ = seed_everywhere(rc)
    settings = cluster_settings(cluster, tmp_path, "reprocess.mode=requeue",
                                "reprocess.requeue_stream={stream}:retry:{group}")
    summary = run(spark, settings)
    for stream in streams:
        for group in GROUPS:
            target = requeue_key(stream, group, "{stream}:retry:{group}")
            assert rc.get_node_from_key(target) == rc.get_node_from_key(stream)
            kinds = Counter(f[b"kind"] for _, f in rc.xrange(target))
            assert kinds == {b"ok": 120, b"fail": 10, b"fail_at_limit": 6}, (target, kinds)
            assert not [e for e, p in pel(rc, stream, group).items()
                        if p.consumer.startswith("recovery-")]
    assert summary.totals["requeued"] == 136 * len(streams) * len(GROUPS)
