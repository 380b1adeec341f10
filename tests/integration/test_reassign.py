"""Re-processing by reassignment (reprocess.mode = reassign) against real servers, checked in
Redis: each entry not dead-lettered ends pending on exactly one live consumer of its group,
spread evenly, never on one of the job's consumers or on one not seen recently, with its
delivery count set back to its deliveries to the application so far."""

from __future__ import annotations

import time
from collections import Counter

import pytest

from tests.support.fault_tools import GROUP, job_args, report_rows, rows_by_key, run_in_process
from tests.support.invariants import final_states, pel
from tests.support.reprocess_tools import (
    LIVE,
    WINDOW_MS,
    kept_alive,
    run_with_small_batches,
    seen_now,
    stuck,
)
from tests.support.servers import ON_ONE_SERVER, ON_REDIS_VERSIONS


def reassign_args(url: str, tmp_path, streams: list[str], *extra: str, run_id: str
                  ) -> list[str]:
    return job_args(url, tmp_path, streams, "reprocess.mode=reassign",
                    f"reprocess.live_within_ms={WINDOW_MS}", *extra, run_id=run_id)


@pytest.mark.slow  # every server: who is live is read as CONSUMER_INACTIVE says (inactive, or idle)
def test_reassign_spreads_entries_over_live_consumers_only(spark, server, tmp_path):
    client = server.client()
    seeded = stuck(client, "ra", {"ok": (20, 1), "poison": (2, 9)})
    seen_now(client, "ra", "app-stale")
    time.sleep(WINDOW_MS / 1000 + 0.5)  # app-stale (and the dead one) no longer live ...
    for consumer in (*LIVE, "recovery-earlier-0"):  # ... these are, one of them the job's own
        seen_now(client, "ra", consumer)
    with kept_alive(server.client(), ["ra"], (*LIVE, "recovery-earlier-0")):
        result = run_in_process(spark, reassign_args(server.url, tmp_path, ["ra"],
                                                     run_id="ra1"))
    assert result.code == 0, result.stderr

    ok = {k[2] for k, v in seeded.items() if v == "ok"}
    owners = {i: p for i, p in pel(client, "ra", GROUP).items() if i in ok}
    assert set(owners) == ok, "every entry still pending, now on a live consumer"
    assert sorted(Counter(p.consumer for p in owners.values()).items()) == \
        [("app-a", 10), ("app-b", 10)]
    assert {p.delivery_count for p in owners.values()} == {1}, "the job's claim not counted"
    rows = rows_by_key(report_rows(spark, tmp_path, "ra1") or [])
    for key, kind in seeded.items():
        (row,) = rows[key]
        if kind == "ok":
            assert (row["action"], row["reassigned_to"], row["outcome"]) == \
                ("reassigned", owners[key[2]].consumer, owners[key[2]].consumer)
        else:
            assert (row["action"], row["reassigned_to"], row["outcome"]) == \
                ("dead_lettered", None, None)
        assert row["requeued_id"] is None
    assert result.summary["totals"]["reassigned"] == 20

    # The application reads its own pending entries (ID 0) and sees them, fields intact.
    reply = client.xreadgroup(GROUP, "app-a", {"ra": "0"}, count=100)
    mine = {i.decode(): f for i, f in reply[0][1] if i.decode() in ok}
    assert len(mine) == 10 and all(f[b"kind"] == b"ok" for f in mine.values())
    assert {pel(client, "ra", GROUP)[i].delivery_count for i in mine} == {2}


@pytest.mark.slow
def test_without_a_live_consumer_entries_stay_pending_and_say_why(spark, redis_server,
                                                                  tmp_path):
    client = redis_server.client()
    seeded = stuck(client, "lonely", {"ok": (5, 1)})
    time.sleep(WINDOW_MS / 1000 + 0.5)  # seeding touched the dead consumer: let it go stale
    result = run_in_process(spark, reassign_args(redis_server.url, tmp_path, ["lonely"],
                                                 run_id="lonely"))
    assert result.code == 0, result.stderr
    assert set(final_states(client, seeded).values()) == {"pending:recovery-lonely-0"}
    rows = [r[0] for r in rows_by_key(report_rows(spark, tmp_path, "lonely") or []).values()]
    assert len(rows) == 5 and {r["action"] for r in rows} == {"failed"}
    assert all("no live consumer" in r["reason"] for r in rows)


@pytest.mark.slow
@pytest.mark.parametrize("faults_asked", [("apply 1 0", "apply 2 1")])
@ON_REDIS_VERSIONS  # a fault trial; Valkey's inactive: test_reassign_spreads_entries_over_live_...
def test_task_retries_reassign_each_entry_once(spark, server, tmp_path, faults,
                                               faults_asked):
    client = server.client()
    streams = ["rr-a", "rr-b{x}"]
    seeded = {}
    for stream in streams:
        seeded.update(stuck(client, stream, {"ok": (30, 1)}))
    time.sleep(WINDOW_MS / 1000 + 0.5)  # seeding touched the dead consumer: let it go stale
    for line in faults_asked:
        faults(line)
    with kept_alive(server.client(), streams, LIVE):
        result = run_with_small_batches(spark, reassign_args(
            server.url, tmp_path, streams, "claim.count=5", run_id="retried"))
    assert result.code == 0, result.stderr
    states = final_states(client, seeded)
    assert set(states.values()) == {"pending:app-a", "pending:app-b"}
    rows = rows_by_key(report_rows(spark, tmp_path, "retried") or [])
    assert {k: len(v) for k, v in rows.items()} == dict.fromkeys(seeded, 1)
    assert any(r[0]["action"] == "skipped" for r in rows.values()), "the faults fired"
    for key, (row,) in rows.items():
        if row["action"] == "reassigned":
            assert states[key] == f"pending:{row['reassigned_to']}"


def test_a_reassign_window_of_zero_exits_2(tmp_path):
    result = run_in_process(None, job_args("redis://127.0.0.1:1/0", tmp_path, ["s"],
                                           "reprocess.mode=reassign",
                                           "reprocess.live_within_ms=0"))
    assert result.code == 2, result.stderr
    (line,) = result.error_lines()
    assert "reprocess.live_within_ms" in line, line


@pytest.mark.slow
@ON_ONE_SERVER  # the reassignment on every server: test_reassign_spreads_entries_over_live_...
def test_the_health_histogram_counts_the_pel_the_pending_count_describes(spark, server,
                                                                          tmp_path):
    """Issue 64: a run that reassigns counts its PEL histogram in its claim steps, then reads
    what the claim left once the steps are handed over. The entries it gave to live
    consumers are then theirs: they must not be counted a second time as left. The
    histogram's sum is XPENDING's count as found, read from Redis before the run."""
    client = server.client()
    stuck(client, "hist", {"ok": (20, 1), "poison": (2, 9)})
    for consumer in LIVE:  # live, each holding one fresh entry the claim leaves alone
        seen_now(client, "hist", consumer)
    found = client.xpending("hist", GROUP)["pending"]
    assert found == 24
    with kept_alive(server.client(), ["hist"], LIVE):
        result = run_in_process(spark, reassign_args(server.url, tmp_path, ["hist"],
                                                     run_id="hist1"))
    assert result.code == 0, result.stderr
    assert result.summary["totals"]["reassigned"] == 20, "the fault: entries given away"
    rows = [r.asDict(recursive=True) for r in spark.read.parquet(
        result.summary["health_path"]).collect() if r["stream"] == "hist"]
    (health,) = rows
    assert health["pending"] == found
    assert sum(health["deliveries"].values()) == found, health["deliveries"]
    assert health["deliveries"] == {"1": 22, "6-10": 2}
    assert sum(health["idle_ages"].values()) == found, health["idle_ages"]
