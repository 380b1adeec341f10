"""Per-key ordered recovery (issue 63: ``order.key_field``): ``recovery.driver.ordered``,
``recovery.executor.ordered``, ``recovery.executor.handover.ordered``,
``recovery.redis_io.held_keys``, ``recovery.settings.order``.

Settings refused before Redis is touched; then whole runs against real servers (Redis 7.0,
Redis 6.2, Valkey 8.1), the handler (``tests.support.order_handler:in_order``) recording per
key what it was handed and what succeeded. Each run checks Redis itself (XPENDING per entry,
the dead-letter stream) and the report rows, not only the summary.
"""

from __future__ import annotations

import json
import threading
import time
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest

from recovery.executor.ordered import id_order, key_of
from recovery.metrics.families import run_registry
from recovery.metrics.recovery_run import recovery_facts
from recovery.params import OrderParams
from recovery.redis_io.dlq_names import dead_letter_key
from recovery.redis_io.streams import stream_id_key
from recovery.report.summary import RunSummary
from recovery.settings.model import load_settings
from tests.support.backlogs import DEAD, HOUR_MS
from tests.support.cluster_fixtures import keys_on_every_primary
from tests.support.fault_tools import (
    GROUP,
    finished,
    kill_landed,
    kill_tree,
    run_in_process,
    spark_submit,
    wait_until,
    write_control,
)
from tests.support.order_handler import (
    COUNT,
    DONE,
    FAIL,
    PARTITIONS,
    REJECT,
    SEEN,
    VIOLATIONS,
)
from tests.support.order_tools import (
    HANDLER,
    STREAM,
    age,
    args,
    deliveries,
    pending_owners,
    recorded,
    rows_of,
    seed,
)
from tests.support.servers import start_server

# --- settings -------------------------------------------------------------------------------

@pytest.mark.parametrize("mode", ["requeue", "reassign"])
def test_order_with_requeue_or_reassign_is_refused(tmp_path: Path, mode: str) -> None:
    """Exit 2 before Redis (port 1: nothing listens) with a line naming both settings."""
    result = run_in_process(None, args("redis://127.0.0.1:1/0", tmp_path,
                                       f"reprocess.mode={mode}"))
    assert result.code == 2, result.stderr
    (line,) = result.error_lines()
    assert "order.key_field needs reprocess.mode = \"handler\"" in line, line
    assert mode in line


def test_order_with_a_plan_is_refused(tmp_path: Path) -> None:
    result = run_in_process(None, [*args("redis://127.0.0.1:1/0", tmp_path),
                                   "--plan", str(tmp_path)])
    assert result.code == 2, result.stderr
    assert any("--plan cannot be applied with order.key_field" in line
               for line in result.error_lines()), result.stderr


def test_bad_order_settings_name_the_field(tmp_path: Path) -> None:
    result = run_in_process(None, args("redis://127.0.0.1:1/0", tmp_path,
                                       "order.missing_key=drop"))
    assert result.code == 2
    assert "order.missing_key" in result.stderr


def test_key_field_per_stream_pattern_and_id_order() -> None:
    order = OrderParams("k", (("audit*", ""), ("pay:*", "account")))
    assert [order.field_of(s) for s in ("orders", "audit:1", "pay:eu")] == \
        ["k", None, "account"]
    assert key_of([(b"a", b"1"), (b"k", b"x"), (b"k", b"y")], "k") == b"x"
    assert key_of([(b"a", b"1")], "k") is None
    ids = ["10-2", "9-100", "10-10", "18446744073709551615-18446744073709551615", "0-0"]
    assert sorted(ids, key=id_order) == sorted(ids, key=stream_id_key)


def test_held_keys_reach_the_pushed_gauges(tmp_path: Path) -> None:
    settings = load_settings(None, ["streams.keys=o", f"report.path={tmp_path}"])
    summary = RunSummary("r", held_keys=3, oldest_held_age_s=7200.5)
    registry = run_registry(recovery_facts(settings, summary, 0, 0.0)[0], 10)
    assert registry.get_sample_value("redis_stream_recovery_run_held_keys") == 3
    assert registry.get_sample_value("redis_stream_recovery_run_oldest_held_age_seconds") \
        == 7200.5
    registry = run_registry(recovery_facts(settings, RunSummary("r"), 0, 0.0)[0], 10)
    assert registry.get_sample_value("redis_stream_recovery_run_held_keys") == 0  # no order
    assert registry.get_sample_value("redis_stream_recovery_run_oldest_held_age_seconds") == 0


# --- runs -------------------------------------------------------------------------------------


@pytest.mark.slow
def test_keys_in_id_order_across_split_tasks_held_behind_failures_then_resumed(
        spark, server, tmp_path):
    """40 keys x 15 entries interleaved in one stream split over 4 tasks, 6 keyless: each
    key's successes come in ID order, never two of a key in one call, keys spread over
    tasks. Two heads fail (k3's 5th entry, k7's 1st): the rest of each key stays pending,
    reported held behind the head; every other key is done. The next run (failures mended)
    resumes each held key at its head, in order."""
    client = server.client()
    write_control(server.url)
    ids = seed(client, keys=40, per_key=15, keyless=6)
    failing = {"k3": ids["k3"][4], "k7": ids["k7"][0]}
    client.sadd(FAIL, *failing.values())
    reports = tmp_path / "reports"
    overrides = ("spark.partitions=4", "spark.split_min_pending=100", "claim.count=25",
                 "handler.batch_size=7")
    first = run_in_process(spark, args(server.url, reports, *overrides))
    assert first.code == 0, first.stderr[-3000:]

    keys = sorted(ids)
    done, seen = recorded(client, DONE, keys), recorded(client, SEEN, keys)
    assert client.lrange(VIOLATIONS, 0, -1) == []
    assert sorted(done.pop("-"), key=stream_id_key) == ids["-"]  # each its own key
    for key in done:
        cut = ids[key].index(failing[key]) if key in failing else len(ids[key])
        assert done[key] == ids[key][:cut], key  # in ID order, nothing after the head
        assert seen[key] == (ids[key][:cut + 1] if key in failing else ids[key]), key
    assert len({client.hget(PARTITIONS, k) for k in keys if k != "-"}) > 1, "one task"
    held = {k: ids[k][ids[k].index(head) + 1:] for k, head in failing.items()}
    owners = pending_owners(client)
    expected = [*failing.values(), *held["k3"], *held["k7"]]
    assert sorted(owners, key=stream_id_key) == sorted(expected, key=stream_id_key)
    assert all(o.startswith("recovery-") for o in owners.values())
    # The held entries' counts as before the run's claim (seeded 1); each head was delivered.
    assert deliveries(client) == {i: 2 if i in failing.values() else 1 for i in owners}
    rows = rows_of(spark, reports, first.summary)
    assert len(rows) == 40 * 15 + 6
    for key, head in failing.items():
        assert rows[head]["action"] == "failed"
        for entry_id in held[key]:
            assert rows[entry_id]["action"] == "held", rows[entry_id]
            assert f"held behind {head} of its key, which failed" in rows[entry_id]["reason"]
    assert first.summary["totals"]["held"] == len(held["k3"]) + len(held["k7"])
    assert first.summary["totals"]["failed"] == 2
    assert first.summary["held_keys"] == 2
    oldest_s = min(stream_id_key(head)[0] for head in failing.values()) / 1000
    assert abs(first.summary["oldest_held_age_s"] - (time.time() - oldest_s)) < 30

    client.delete(FAIL)
    age(client, list(owners))
    second = run_in_process(spark, args(server.url, reports, *overrides))
    assert second.code == 0, second.stderr[-3000:]
    done = recorded(client, DONE, keys)
    done["-"].sort(key=stream_id_key)
    assert all(done[key] == ids[key] for key in keys)  # both runs together: in ID order
    assert client.xpending(STREAM, GROUP)["pending"] == 0
    assert client.lrange(VIOLATIONS, 0, -1) == []
    assert second.summary["totals"]["reprocessed"] == len(owners)
    assert second.summary["totals"]["held"] == 0 and second.summary["held_keys"] == 0
    assert second.summary["oldest_held_age_s"] is None


@pytest.mark.slow
@pytest.mark.parametrize("releases", [True, False])
def test_a_head_pending_elsewhere_holds_its_key_and_a_dead_lettered_one_releases_it(
        spark, redis_version_server, tmp_path, releases):
    """k0's oldest entry is pending on a live consumer (idle 0: not claimed): k0's claimed
    entries after it are held, pending, naming it. k1's head is rejected by the handler
    (Result.dead_letter): it is dead-lettered and the rest of k1 handled, or held with
    ``order.dead_letter_releases = false``. k2 goes on either way; a keyless entry is its
    own key. Then the live consumer acks its entry and the next run finishes k0 in order."""
    server = redis_version_server
    client = server.client()
    write_control(server.url)
    ids = seed(client, keys=3, per_key=5, keyless=1)
    live = ids["k0"][0]
    client.xclaim(STREAM, GROUP, "alive", 0, [live], idle=0, justid=True)
    client.sadd(REJECT, ids["k1"][0])
    reports = tmp_path / "reports"
    first = run_in_process(spark, args(server.url, reports, "spark.partitions=2",
                                       f"order.dead_letter_releases={str(releases).lower()}"))
    assert first.code == 0, first.stderr[-3000:]
    keys = sorted(ids)
    done = recorded(client, DONE, keys)
    assert done["k0"] == [] and done["k2"] == ids["k2"] and done["-"] == ids["-"]  # one
    assert done["k1"] == (ids["k1"][1:] if releases else [])
    dead = [f[b"x-original-id"].decode()
            for _, f in client.xrange(dead_letter_key(STREAM, ":dlq"))]
    assert dead == [ids["k1"][0]]
    owners = pending_owners(client)
    assert owners[live] == "alive"
    expected = {live, *ids["k0"][1:], *([] if releases else ids["k1"][1:])}
    assert set(owners) == expected
    rows = rows_of(spark, reports, first.summary)
    assert live not in rows  # never claimed
    for entry_id in ids["k0"][1:]:
        assert rows[entry_id]["action"] == "held"
        assert f"held behind {live} of its key, pending on another consumer" \
            in rows[entry_id]["reason"]
    for entry_id in ids["k1"][1:]:
        assert rows[entry_id]["action"] == ("reprocessed" if releases else "held")
    assert first.summary["held_keys"] == (1 if releases else 2)

    client.xack(STREAM, GROUP, live)
    client.delete(REJECT)
    age(client, [i for i in owners if i != live])
    second = run_in_process(spark, args(server.url, reports, "spark.partitions=2"))
    assert second.code == 0, second.stderr[-3000:]
    done = recorded(client, DONE, keys)
    assert done["k0"] == ids["k0"][1:] and done["k1"] == ids["k1"][1:]
    assert client.xpending(STREAM, GROUP)["pending"] == 0


def in_order_at_least_once(done: list[str]) -> list[str]:
    """`done` with repeats of the entry before dropped (a replay after a task failure);
    asserts nothing goes back: each entry is at or after the one before, in ID order."""
    assert all(stream_id_key(a) <= stream_id_key(b) for a, b in pairwise(done)), done
    return done[:1] + [b for a, b in pairwise(done) if a != b]


@pytest.mark.slow
def test_task_retries_in_claim_and_hand_over_keep_each_key_in_order(
        spark, redis_server, tmp_path, faults):
    """Task failures (the suite's session retries tasks: local[2,3]) at the second claim step
    and after the third wave of every ordered hand-over task: the retried attempts replay each
    key from its first entry not yet acked, so every key's successes stay in ID order, each
    entry acked once, the failed head's key held; one report row per entry."""
    client = redis_server.client()
    write_control(redis_server.url)
    ids = seed(client, keys=40, per_key=15)
    head = ids["k3"][4]
    client.sadd(FAIL, head)
    faults("claim 2 0")
    faults("ordered 3 0")
    reports = tmp_path / "reports"
    result = run_in_process(spark, args(redis_server.url, reports, "spark.partitions=4",
                                        "spark.split_min_pending=100", "claim.count=25",
                                        "handler.batch_size=7"))
    assert result.code == 0, result.stderr[-3000:]
    done = recorded(client, DONE, sorted(ids))
    for key, key_ids in ids.items():
        cut = 4 if key == "k3" else len(key_ids)
        assert in_order_at_least_once(done[key]) == key_ids[:cut], key
    assert client.lrange(VIOLATIONS, 0, -1) == []
    assert sorted(pending_owners(client), key=stream_id_key) == ids["k3"][4:]
    rows = rows_of(spark, reports, result.summary)
    assert len(rows) == 600
    assert [rows[i]["action"] for i in ids["k3"][4:]] == ["failed"] + ["held"] * 10
    assert {rows[i]["action"] for k in ids if k != "k3" for i in ids[k]} <= \
        {"reprocessed", "skipped"}  # skipped: acked by the failed attempt


@pytest.mark.slow
def test_sigkill_mid_hand_over_then_rerun_keeps_each_key_in_order(spark, redis_server,
                                                                   tmp_path):
    """spark-submit (local[2]) SIGKILLed, with all its processes, once the handler has
    acked 60 of 300 entries (20 keys x 15): each key's successes over the killed run and
    the re-runs are in ID order, an entry replayed only right after itself (at-least-once,
    in order), nothing left pending."""
    client = redis_server.client()
    write_control(redis_server.url, delay_s=0.05)
    ids = seed(client, keys=20, per_key=15)
    quick = ("claim.min_idle_ms=1000", "spark.partitions=2", "handler.batch_size=5")
    proc = spark_submit([*args(redis_server.url, tmp_path / "reports", *quick,
                              "spark.split_min_pending=100", "claim.count=20"),
                         "--run-id", "killed"], tmp_path / "killed")
    assert wait_until(lambda: int(client.get(COUNT) or 0) >= 60, proc, 180, "60 acks"), \
        (tmp_path / "killed" / "stdout").read_text()[-3000:]
    assert kill_landed(proc)
    assert 60 <= int(client.get(COUNT) or 0) < 300  # killed with work left
    pel_then = pending_owners(client)
    again = run_in_process(spark, [*args(redis_server.url, tmp_path / "reports", *quick),
                                   "--run-id", "killed"])  # its ID is still taken
    assert again.code == 2 and "--run-id killed is taken" in again.stderr, again.stderr
    assert pending_owners(client) == pel_then
    write_control(redis_server.url)
    reruns = 0
    while reruns < 3:  # the killed run's claims become idle (1 s), then re-run
        reruns += 1
        time.sleep(1.1)
        rerun = run_in_process(spark, args(redis_server.url, tmp_path / "reports", *quick))
        assert rerun.code == 0, rerun.stderr[-3000:]
        if client.xpending(STREAM, GROUP)["pending"] == 0:
            break
    assert client.xpending(STREAM, GROUP)["pending"] == 0, f"{reruns} re-runs"
    done = recorded(client, DONE, sorted(ids))
    assert all(in_order_at_least_once(done[key]) == ids[key] for key in ids), done
    assert client.lrange(VIOLATIONS, 0, -1) == []


@pytest.mark.slow
def test_two_runs_at_once_never_hand_a_key_over_out_of_order(spark, redis_server, tmp_path):
    """A spark-submit run and an in-process run at once on the same group, each with a share
    of every key's entries: the first claims the older half of each key (the newer half is
    not idle yet); once it hands over (slowly), the newer half ages and the second run claims
    it, holding each entry behind the older ones the first run still has. Each key's
    successes over both runs, and the re-runs that finish the rest, are in ID order; nothing
    is left pending. (The share is made, not raced for: on a loaded machine the first run's
    claim took every entry before the second started.)"""
    client = redis_server.client()
    write_control(redis_server.url, delay_s=0.2)
    ids = seed(client, keys=20, per_key=15)
    newer = [i for key_ids in ids.values() for i in key_ids[8:]]
    client.xclaim(STREAM, GROUP, DEAD, 0, newer, idle=0, justid=True)  # not idle yet
    quick = ("claim.min_idle_ms=600000", "spark.partitions=2", "handler.batch_size=5",
             "claim.count=10", "spark.split_min_pending=100")
    proc = spark_submit(args(redis_server.url, tmp_path / "reports", *quick), tmp_path / "a")
    assert wait_until(lambda: any(client.llen(SEEN + k) for k in ids), proc, 180,
                      "the first run's handler")
    client.xclaim(STREAM, GROUP, DEAD, 0, newer, idle=HOUR_MS, justid=True)
    second = run_in_process(spark, args(redis_server.url, tmp_path / "reports", *quick))
    first = finished(proc, tmp_path / "a", 300)
    assert (first.code, second.code) == (0, 0), first.stderr[-2000:] + second.stderr[-2000:]
    # Both claimed a share: they overlapped.
    assert 0 < first.summary["totals"]["reprocessed"] <= 160
    assert sum(second.summary["totals"].values()) > 0
    write_control(redis_server.url)
    for _ in range(3):
        if client.xpending(STREAM, GROUP)["pending"] == 0:
            break
        age(client, list(pending_owners(client)))
        assert run_in_process(spark, args(redis_server.url, tmp_path / "reports",
                                          *quick)).code == 0
    assert client.xpending(STREAM, GROUP)["pending"] == 0
    done = recorded(client, DONE, sorted(ids))
    assert all(in_order_at_least_once(done[key]) == ids[key] for key in ids), done
    assert client.lrange(VIOLATIONS, 0, -1) == []


@pytest.mark.slow
def test_per_key_order_on_a_redis_cluster(spark, redis_cluster, redis_server, tmp_path):
    """One stream on each of three primaries, 4 keys x 6 entries each: on every stream the
    first entry of key 0 is pending on a live consumer (its key held behind it, read on that
    stream's primary), key 1's third entry fails (the rest held, counts given back by the
    script on that primary); every other key done in ID order. The handler records on a
    server of its own."""
    redis_cluster.wait_healthy()
    redis_cluster.flush()
    rc = redis_cluster.client()
    write_control(redis_server.url)
    record = redis_server.client()
    streams = keys_on_every_primary(rc, 1, prefix="ordered")
    ids: dict[str, list[str]] = {}
    live, failing = [], []
    for n, stream in enumerate(streams):
        keys = seed(rc, 4, 6, stream=stream, prefix=f"s{n}k")
        rc.xclaim(stream, GROUP, "alive", 0, [keys[f"s{n}k0"][0]], idle=0, justid=True)
        live.append(keys[f"s{n}k0"][0])
        failing.append(keys[f"s{n}k1"][2])
        ids.update(keys)
    record.sadd(FAIL, *failing)
    sets = [f"redis.url={redis_cluster.url}", f"report.path={tmp_path / 'reports'}",
            "streams.keys=" + ",".join(streams), HANDLER, "order.key_field=k",
            "spark.partitions=3"]
    result = run_in_process(spark, [a for s in sets for a in ("--set", s)])
    assert result.code == 0, result.stderr[-3000:]
    done = recorded(record, DONE, sorted(ids))
    for n, stream in enumerate(streams):
        assert done[f"s{n}k0"] == [] and done[f"s{n}k1"] == ids[f"s{n}k1"][:2]
        assert done[f"s{n}k2"] == ids[f"s{n}k2"] and done[f"s{n}k3"] == ids[f"s{n}k3"]
        rows = {r["message_id"].decode(): (r["consumer"].decode(), r["times_delivered"])
                for r in rc.xpending_range(stream, GROUP, "-", "+", 100)}
        held = [*ids[f"s{n}k0"][1:], *ids[f"s{n}k1"][3:]]
        assert sorted(rows, key=stream_id_key) == sorted(
            [live[n], failing[n], *held], key=stream_id_key)
        assert rows[live[n]][0] == "alive"
        assert all(rows[i][0].startswith("recovery-") and rows[i][1] == 1 for i in held)
        assert rows[failing[n]][1] == 2
    assert result.summary["held_keys"] == 2 * len(streams)
    rc.close()


@pytest.mark.slow
@pytest.mark.parametrize("policy", ["hold", "dead_letter"])
def test_entries_without_the_key_field_held_or_dead_lettered(spark, redis_server, tmp_path,
                                                             policy):
    """``order.missing_key``: `hold` leaves the 3 keyless entries pending on the job (report:
    held, naming the field), `dead_letter` moves them to the dead-letter stream with
    ``x-death-reason`` ``order-key-missing``; the keyed entries are handled in order."""
    client = redis_server.client()
    write_control(redis_server.url)
    ids = seed(client, keys=2, per_key=4, keyless=3)
    reports = tmp_path / "reports"
    result = run_in_process(spark, args(redis_server.url, reports, "spark.partitions=2",
                                        f"order.missing_key={policy}"))
    assert result.code == 0, result.stderr[-3000:]
    done = recorded(client, DONE, sorted(ids))
    assert done == {"k0": ids["k0"], "k1": ids["k1"], "-": []}
    owners = pending_owners(client)
    dead = {f[b"x-original-id"].decode(): f[b"x-death-reason"]
            for _, f in client.xrange(dead_letter_key(STREAM, ":dlq"))}
    rows = rows_of(spark, reports, result.summary)
    if policy == "hold":
        assert sorted(owners) == sorted(ids["-"]) and dead == {}
        assert all(rows[i]["action"] == "held" and "no 'k' field" in rows[i]["reason"]
                   for i in ids["-"])
    else:
        assert owners == {}
        assert dead == dict.fromkeys(ids["-"], b"order-key-missing")
        assert all(rows[i]["action"] == "dead_lettered" for i in ids["-"])


@pytest.mark.slow
def test_task_retries_on_executors_of_their_own_keep_each_key_in_order(
        spark, redis_server, tmp_path, faults):
    """spark-submit on local-cluster[2,1,1024] (executors of their own, failed tasks
    retried): every claim task fails once at its 2nd step, every hand-over task after its
    2nd wave, and its second attempt after its 3rd: each key's successes in ID order over
    all attempts, the failed head's key held, one report row per entry."""
    client = redis_server.client()
    write_control(redis_server.url)
    ids = seed(client, keys=20, per_key=10)
    client.sadd(FAIL, ids["k5"][3])
    for fault in ("claim 2 0", "ordered 2 0", "ordered 3 1"):
        faults(fault)
    reports, logs = tmp_path / "reports", tmp_path / "logs"
    proc = spark_submit([*args(redis_server.url, reports, "spark.partitions=2",
                               "claim.count=20", "spark.split_min_pending=100"),
                         "--run-id", "retried"], logs, master="local-cluster[2,1,1024]")
    try:
        result = finished(proc, logs, 360)
    finally:
        if proc.poll() is None:
            kill_tree(proc)
    assert result.code == 0, result.stderr[-3000:]
    done = recorded(client, DONE, sorted(ids))
    for key, key_ids in ids.items():
        assert in_order_at_least_once(done[key]) == key_ids[:3 if key == "k5" else 10], key
    assert sorted(pending_owners(client), key=stream_id_key) == ids["k5"][3:]
    rows = rows_of(spark, reports, {"run_id": "retried"})
    assert len(rows) == 200
    assert [rows[i]["action"] for i in ids["k5"][3:]] == ["failed"] + ["held"] * 6


@pytest.mark.slow
@pytest.mark.xdist_group("connect")
def test_per_key_order_under_spark_connect(redis_server, tmp_path, connect_server):
    """The ordered path with DataFrame APIs only (Spark Connect: a client of the tests' local
    Connect server, ``remote("local[2]")``): a key held behind a live consumer's entry (the
    blocker pass runs), one behind a failed head, the others done in ID order."""
    client = redis_server.client()
    write_control(redis_server.url)
    ids = seed(client, keys=3, per_key=4)
    client.xclaim(STREAM, GROUP, "alive", 0, [ids["k0"][0]], idle=0, justid=True)
    client.sadd(FAIL, ids["k1"][1])
    proc = connect_server.run(redis_server.url, tmp_path / "r", HANDLER, "order.key_field=k")
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert (summary["totals"]["held"], summary["held_keys"]) == (3 + 2, 2)
    done = recorded(client, DONE, sorted(ids))
    assert done == {"k0": [], "k1": ids["k1"][:1], "k2": ids["k2"]}
    assert sorted(pending_owners(client), key=stream_id_key) == \
        sorted([*ids["k0"], *ids["k1"][1:]], key=stream_id_key)


@pytest.mark.slow
def test_redis_restart_mid_hand_over_then_rerun_keeps_each_key_in_order(spark, redis_server,
                                                                        tmp_path):
    """The job's Redis (AOF, fsync always) is SIGKILLed once the handler acked 40 of 200
    entries and started again 1.5 s later on the same AOF; whatever the run's exit, the
    re-runs finish the work, and each key's successes over all runs are in ID order. The
    handler records on a server of its own."""
    server = start_server("redis", "--appendonly", "yes", "--appendfsync", "always")
    try:
        client = server.client()
        write_control(redis_server.url, delay_s=0.05)
        record = redis_server.client()
        ids = seed(client, keys=20, per_key=10)
        quick = ("claim.min_idle_ms=1000", "spark.partitions=2", "handler.batch_size=5")
        outcome: dict[str, Any] = {}
        job = threading.Thread(target=lambda: outcome.update(
            r=run_in_process(spark, args(server.url, tmp_path / "reports", *quick))))
        job.start()
        wait_until(lambda: int(record.get(COUNT) or 0) >= 40, None, 180, "40 acks")
        server.kill()
        in_flight = job.is_alive()
        time.sleep(1.5)
        server.start()
        job.join(180)
        assert in_flight and not job.is_alive()
        assert outcome["r"].code in (0, 1), outcome["r"].stderr[-2000:]
        write_control(redis_server.url)
        client = server.client()
        for _ in range(4):
            if client.xpending(STREAM, GROUP)["pending"] == 0:
                break
            time.sleep(1.1)
            rerun = run_in_process(spark, args(server.url, tmp_path / "reports", *quick))
            assert rerun.code == 0, rerun.stderr[-2000:]
        assert client.xpending(STREAM, GROUP)["pending"] == 0
        done = recorded(record, DONE, sorted(ids))
        assert all(in_order_at_least_once(done[key]) == ids[key] for key in ids), done
    finally:
        server.stop()
