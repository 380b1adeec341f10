"""--plan: a dry run's report applied exactly, checked in Redis, on Redis 7.0, Valkey 8.1 and
Redis 6.2; and every plan the job must refuse (exit 2, Redis unchanged)."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
from redis import Redis

from recovery.driver import plan as plan_module
from recovery.driver.job import run
from recovery.driver.plan import MANIFEST
from recovery.executor.claim.by_plan import plan_steps
from recovery.executor.claim.throttle import Throttle
from recovery.params import Unit
from recovery.redis_io.redis_conn import RedisConn
from recovery.report.run_report import read_run, read_run_dir
from recovery.settings.model import executor_params
from recovery.testing.backlog import add_entries, deliver, make_stuck
from tests.support.backlogs import DEAD, HOUR_MS, LIVE, seed
from tests.support.fault_tools import job_args, run_in_process, seed_kinds
from tests.support.invariants import final_states, pel
from tests.support.lost_reply import ReplyDropper
from tests.support.servers import start_server

STREAMS = ["p-a", "p-b{t}", "p-c"]
GROUPS = ["billing", "audit"]


def _dry_run_plan(spark, settings) -> str:  # type: ignore[no-untyped-def]
    summary = run(spark, settings, dry_run=True)
    assert summary.report_path is not None
    return summary.report_path


@pytest.mark.slow
def test_a_plan_is_applied_exactly(spark, client, make_settings):
    """Six units over three streams and two groups, two partitions. After the dry run: new
    stuck entries appear (not planned: never touched), a live consumer acks one planned
    entry and picks up another (both left alone, reported skipped with the reason), one
    planned entry is delivered six more times (now over the limit: dead-lettered, the reason
    says the count changed), a planned poison entry's count drops (now re-processed), one
    is deleted upstream. Everything else gets its planned action."""
    seeded = seed(client, STREAMS, GROUPS)
    settings = make_settings("streams.match=p-*", "claim.max_deliveries=5",
                             "spark.partitions=2", "claim.count=7",
                             "handler.path=tests.support.handlers:verify_or_fail")
    plan_dir = _dry_run_plan(spark, settings)
    plan = {(r.stream, r.group, r.id): r for r in read_run_dir(spark, plan_dir).collect()}
    by_kind = {kind: sorted(k for k, v in seeded.kind.items() if v == kind and k[1] == "billing"
                            and k[0] == "p-a") for kind in ("ok", "poison")}
    acked, picked, raised, deleted = by_kind["ok"][:4]
    lowered = by_kind["poison"][0]
    stream, group = "p-a", "billing"
    client.xack(stream, group, acked[2])
    make_stuck(client, stream, group, LIVE, [picked[2]], 10, 2)
    make_stuck(client, stream, group, DEAD, [raised[2]], HOUR_MS, 7)
    make_stuck(client, stream, group, DEAD, [lowered[2]], HOUR_MS, 1)
    client.xdel(stream, deleted[2])
    late = add_entries(client, stream, 5, lambda i: {"late": str(i)})
    assert deliver(client, stream, group, DEAD, 5) == late
    make_stuck(client, stream, group, DEAD, late, HOUR_MS, 1)
    before = pel(client, stream, group)

    summary = run(spark, settings, plan=plan_dir)

    assert summary.plan == plan_dir and f'"plan":"{plan_dir}"' in summary.json_line()
    rows = {(r.stream, r.group, r.id): r for r in
            read_run(spark, settings.report.path, summary.run_id).collect()}
    assert set(rows) == set(plan), "exactly the planned entries are reported"
    assert summary.totals["skipped"] == 2
    after = pel(client, stream, group)
    for entry in late:  # not planned: untouched
        assert after[entry] == before[entry]
    assert rows[acked].action == "skipped" and "no longer pending" in rows[acked].reason
    assert rows[picked].action == "skipped" and f"picked up by consumer {LIVE}" in \
        rows[picked].reason
    assert after[picked[2]] == before[picked[2]]  # still the live consumer's, count as it was
    assert rows[raised].action == "dead_lettered" and rows[raised].delivery_count == 8
    assert "delivery count changed since the plan (planned 2, now 8)" in rows[raised].reason
    assert rows[lowered].action == "reprocessed" and "planned 10, now 2" in rows[lowered].reason
    also_deleted = (stream, "audit", deleted[2])  # a stream's entry is every group's
    assert rows[deleted].action == rows[also_deleted].action == "deleted"
    changed = {acked, picked, raised, lowered, deleted, also_deleted}
    for key, row in rows.items():
        if key not in changed:
            assert row.delivery_count == plan[key].delivery_count and not (
                row.reason or "").count("changed"), (key, row)
            assert row.action == seeded.action[key], (key, row)
    states = final_states(client, {k: None for k in rows})
    for key, row in rows.items():
        state = {"reprocessed": "acked", "dead_lettered": "dead_lettered", "deleted": "acked",
                 "failed": f"pending:recovery-{summary.run_id}-"}.get(row.action)
        if state is not None:
            assert states[key].startswith(state), (key, row.action, states[key])
    assert states[picked] == f"pending:{LIVE}" and states[acked] == "acked"
    fresh = [k for k, kind in seeded.kind.items() if kind == "fresh"]
    assert all(states_of(client, k) == f"pending:{LIVE}" for k in fresh)


def states_of(client: Redis, key: tuple[str, str, str]) -> str:
    return final_states(client, {key: None})[key]


# --- refusals: one line, exit 2, Redis unchanged -------------------------------------------

def _snapshot(client: Redis) -> dict:
    """What a run could change: every key's content and each group's PEL (owner, count)."""
    snap: dict = {"keys": sorted(client.keys("*"))}
    for stream in ("r-a", "r-b"):
        snap[stream] = client.xrange(stream)
        snap[(stream, "g")] = sorted(pel(client, stream, "g").items())
    return snap


def _edit_manifest(plan_dir: str, **changes: object) -> None:
    path = Path(plan_dir) / MANIFEST
    data = json.loads(path.read_text())
    data.update(changes)
    path.write_text(json.dumps(data))


REFUSALS = {
    "missing directory": "no such directory",
    "no manifest": "holds no _plan.json",
    "corrupt manifest": "cannot be read",
    "real run": "report of a real run",
    "too old": "older than plan.max_age_s = 3600",
    "restarted server": "another server",
    "another server": "another server",
    "another database": "another server",
    "empty": "holds no entries",
    "corrupt report": "report files cannot be read",
    "other mode": "reprocess.mode = handler",
    "timeout over the plan's idle": "is not longer than handler.timeout_s (60 s)",
    "backoff schedule": "--set claim.backoff_factor=1",
}


@pytest.mark.slow
@pytest.mark.parametrize("case", list(REFUSALS))
def test_a_plan_that_cannot_be_applied_is_refused_in_one_line(spark, redis_server, tmp_path,
                                                            case):
    client = redis_server.client()
    seed_kinds(client, ["r-a", "r-b"])
    base = tmp_path / "reports"
    args = job_args(redis_server.url, base, ["r-a", "r-b"], "claim.min_idle_ms=60000")
    url = redis_server.url
    if case == "real run":
        first = run_in_process(spark, [*args, "--set", "handler.path=recovery.handlers:"
                                       "example_handler"])
        assert first.code == 0, first.stderr[-2000:]
        plan_dir = first.summary["report_path"]
    else:
        dry = run_in_process(spark, [*args, "--dry-run"])
        assert dry.code == 0, dry.stderr
        plan_dir = dry.summary["report_path"]
    other = None
    if case == "missing directory":
        shutil.rmtree(plan_dir)
    elif case == "no manifest":
        (Path(plan_dir) / MANIFEST).unlink()
    elif case == "corrupt manifest":
        (Path(plan_dir) / MANIFEST).write_text("{not json")
    elif case == "too old":
        _edit_manifest(plan_dir, created_at_ms=json.loads(
            (Path(plan_dir) / MANIFEST).read_text())["created_at_ms"] - 3_700_000)
    elif case == "restarted server":
        _edit_manifest(plan_dir, server={**_server(plan_dir), "ids": ["0" * 40]})
    elif case == "another database":
        url = redis_server.url.rsplit("/", 1)[0] + "/1"
    elif case == "another server":
        other = start_server("redis")
        seed_kinds(other.client(), ["r-a", "r-b"])  # the same names, other entries
        url, client = other.url, other.client()
    elif case == "empty":
        for part in Path(plan_dir).glob("*.parquet"):
            part.unlink()
    elif case == "corrupt report":
        for part in Path(plan_dir).glob("*.parquet"):
            part.write_bytes(b"PAR1 not parquet at all")
    try:
        before = _snapshot(client)
        extra = {"other mode": ["--set", "reprocess.mode=requeue", "--set",
                                "reprocess.requeue_stream={stream}:retry"],
                 "timeout over the plan's idle": ["--set", "handler.timeout_s=60", "--set",
                                                  "claim.min_idle_ms=120000"],
                 "backoff schedule": ["--set", "claim.backoff_factor=2"],
                 }.get(case, [])
        result = run_in_process(spark, [*job_args(url, base, ["r-a", "r-b"]), *extra,
                                        "--plan", plan_dir])
        assert result.code == 2, (result.code, result.stderr)
        (line,) = result.error_lines()
        assert REFUSALS[case] in line and f"--plan {plan_dir}" in line, line
        assert result.summary["status"] in ("error", "failed")
        assert _snapshot(client) == before, "a refused plan touched Redis"
    finally:
        if other is not None:
            other.stop()


def _server(plan_dir: str) -> dict:
    return json.loads((Path(plan_dir) / MANIFEST).read_text())["server"]


@pytest.mark.slow
def test_planned_entries_among_many_pending_others(spark, server, make_settings):
    """Six planned entries spread among 300 a live consumer holds: each page's XPENDING read
    of the range is cut short (it reads 2 x 7 + 64 rows), so the IDs past it are read one by
    one. The planned ones are claimed, one picked up since is left alone, the others are
    untouched (owner, delivery count)."""
    client = server.client()
    stream, group = "crowd", "g"
    ids = add_entries(client, stream, 300, lambda i: {"n": str(i)})
    client.xgroup_create(stream, group, id="0")
    assert deliver(client, stream, group, LIVE, 300) == ids
    stuck = ids[40::50]  # 6 entries: the first read of the page reaches only the first two
    make_stuck(client, stream, group, DEAD, stuck, HOUR_MS, 1)
    settings = make_settings(f"streams.keys={stream}", "claim.count=7")
    plan_dir = _dry_run_plan(spark, settings)
    make_stuck(client, stream, group, LIVE, [stuck[-1]], 5, 2)  # picked up since the plan
    before = pel(client, stream, group)

    summary = run(spark, settings, plan=plan_dir)

    rows = {r.id: r for r in read_run(spark, settings.report.path, summary.run_id).collect()}
    assert sorted(rows) == sorted(stuck)
    assert [rows[i].action for i in stuck] == ["reprocessed"] * 5 + ["skipped"]
    assert f"picked up by consumer {LIVE}" in rows[stuck[-1]].reason
    assert all(rows[i].delivery_count == 2 and rows[i].reason is None for i in stuck[:5])
    after = pel(client, stream, group)
    assert {i: p for i, p in after.items()} == {
        i: p for i, p in before.items() if i not in stuck[:5]}


@pytest.mark.slow
def test_a_manifest_on_another_file_system_goes_through_spark(spark, tmp_path, monkeypatch):
    """A report directory that is not local (``s3a://``, ``hdfs://``: here a local one the
    job is told is not) gets its manifest through Spark's text writer, and reads it back
    through Spark; without a session (before Spark starts) it is not read at all."""
    monkeypatch.setattr(plan_module, "local_directory", lambda path: None)
    run_dir = str(tmp_path / "entries" / "run_id=x")
    manifest = plan_module.Manifest("x", True, 1_700_000_000_000, 600_000, 5, "handler",
                                    {"address": "redis://h:1/0", "db": 0, "cluster": False,
                                     "ids": ["abc"]})
    plan_module.write_manifest(spark, run_dir, manifest)
    assert (tmp_path / "entries" / "run_id=x" / MANIFEST).is_dir()
    assert plan_module.read_manifest(run_dir, spark) == manifest
    assert plan_module.read_manifest(run_dir, None) is None


def test_a_planned_page_whose_reply_was_lost_is_taken_back(server, client, make_settings):
    """The 2nd page's MULTI (XPENDING, XCLAIM) runs but its reply never arrives; redis-py
    sends it again, whose XCLAIM finds those 5 entries not idle (the job's already): they
    are taken back, without fields, in a step without a claim time. Every planned entry is
    output once, with the count Redis has; no extra delivery for the taken-back ones."""
    ids = add_entries(client, "s", 30, lambda i: {"n": str(i)})
    client.xgroup_create("s", "g", id="0")
    assert deliver(client, "s", "g", DEAD, 30) == ids
    make_stuck(client, "s", "g", DEAD, ids, HOUR_MS, 1)
    params = replace(executor_params(make_settings("streams.keys=s", "claim.count=5"), "r1"),
                     planned=True)
    proxy = ReplyDropper(server.port, b"XCLAIM", nth=2)
    conn = RedisConn.open(replace(params.redis, url=proxy.url()))
    try:
        steps = list(plan_steps(conn, params, Unit("s", "g", "job-0"),
                                [(i, 2) for i in ids], Throttle(None)))
    finally:
        conn.close()
        proxy.close()
    assert proxy.dropped == 1
    rows = [r for s in steps for r in s.claimed.to_arrow().to_pylist()]
    assert sorted(r["id"] for r in rows) == sorted(ids)
    owned = {i: p.delivery_count for i, p in pel(client, "s", "g").items()}
    assert {r["id"]: r["delivery_count"] for r in rows} == owned == dict.fromkeys(ids, 2)
    back = [s for s in steps if s.sent_at is None]
    assert [r["id"] for s in back for r in s.claimed.to_arrow().to_pylist()] == ids[5:10]
    assert all(r["fields"] is None for s in back for r in s.claimed.to_arrow().to_pylist())


@pytest.mark.slow
def test_an_applied_plan_shows_the_lag_redis_tells_as_its_dry_run_did(spark, client,
                                                                     make_settings):
    """The group health of ``apply`` showed lag "unknown" on Redis 7.0+ where its dry run
    showed the lag: the plan's units never carried XINFO GROUPS's ``lag``. Both runs' health
    rows now show what Redis tells (None only where it cannot tell: Redis 6.2)."""
    ids = add_entries(client, "lag-s", 8, lambda i: {"n": str(i)})
    client.xgroup_create("lag-s", "g", id="0")
    assert deliver(client, "lag-s", "g", DEAD, 5) == ids[:5]  # 3 never read: lag 3
    make_stuck(client, "lag-s", "g", DEAD, ids[:5], HOUR_MS, 1)
    settings = make_settings('streams.keys=["lag-s"]')
    dry = run(spark, settings, dry_run=True)
    lag = client.xinfo_groups("lag-s")[0].get("lag")  # what Redis tells (absent before 7.0)
    applied = run(spark, settings, plan=dry.report_path)
    assert [h["lag"] for h in dry.unit_health] == [lag]
    assert [h["lag"] for h in applied.unit_health] == [lag]
    assert lag is None or lag == 3
