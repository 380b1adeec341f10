"""Re-processing by requeue (reprocess.mode = requeue) against real servers, checked in Redis:
each entry not dead-lettered ends as exactly one copy in its target stream (fields byte for
byte, plus its deliveries so far) with the original acked, and the delivery limit holds
across requeues."""

from __future__ import annotations

import pytest

from recovery.driver.job import run
from recovery.redis_io.dlq_names import dead_letter_key, requeue_key
from recovery.report.run_report import read_run
from recovery.testing.backlog import make_stuck
from tests.support.backlogs import HOUR_MS, binary_fields
from tests.support.fault_tools import GROUP, job_args, report_rows, rows_by_key, run_in_process
from tests.support.invariants import dead_letters, final_states, pel
from tests.support.redrive_tools import redrive
from tests.support.reprocess_tools import copies, run_with_small_batches, stuck
from tests.support.servers import ON_NEWEST_TOO, ON_ONE_SERVER, ON_REDIS_VERSIONS

CARRIED = b"x-recovery-deliveries"
APP = "app-1"  # the application's consumer, reading the copies




def requeue_args(url: str, tmp_path, streams: list[str], *extra: str, run_id: str) -> list[str]:
    return job_args(url, tmp_path, streams, "reprocess.mode=requeue", *extra, run_id=run_id)


@pytest.mark.slow
@ON_NEWEST_TOO
def test_requeue_appends_one_copy_per_entry_and_acks_the_original(spark, server, tmp_path):
    client = server.client()
    seeded = stuck(client, "rq", {"ok": (30, 1), "poison": (4, 9), "deleted": (3, 1)})
    gone = [k[2] for k, v in seeded.items() if v == "deleted"]
    client.xdel("rq", *gone)
    last_id = client.xinfo_stream("rq")["last-generated-id"].decode()
    result = run_in_process(spark, requeue_args(server.url, tmp_path, ["rq"], run_id="rq1"))
    assert result.code == 0, result.stderr

    assert pel(client, "rq", GROUP) == {}, "originals acked, deleted slots cleared"
    made = copies(client, "rq", last_id)
    originals = {k[2]: binary_fields(i, "ok") for i, k in
                 enumerate(k for k, v in seeded.items() if v == "ok")}
    assert len(made) == 30
    for fields in originals.values():
        _, copy = made[fields[b"n"] + b"/ok"]
        assert {k: v for k, v in copy.items() if k != CARRIED} == fields  # byte for byte
        assert copy[CARRIED] == b"1"  # delivered once to the application before
    assert len(dead_letters(client, "rq")) == 4
    rows = rows_by_key(report_rows(spark, tmp_path, "rq1") or [])
    actions = {k: r[0]["action"] for k, r in rows.items()}
    assert actions == {k: {"ok": "requeued", "poison": "dead_lettered",
                           "deleted": "deleted"}[v] for k, v in seeded.items()}
    assert {r[0]["requeued_id"] for k, r in rows.items() if seeded[k] == "ok"} == \
        {copy_id for copy_id, _ in made.values()}
    assert all(r[0]["outcome"] == r[0]["requeued_id"] and r[0]["reassigned_to"] is None
               for r in rows.values()), "the copy's ID in outcome too, nothing else"
    assert result.summary["totals"]["requeued"] == 30


@pytest.mark.slow
def test_the_delivery_limit_holds_across_requeues(spark, redis_server, tmp_path):
    """The application reads each copy and never acks it; the job runs again. With
    max_deliveries 3 the message reaches the dead-letter stream after exactly 3 deliveries
    to the application, its total in x-delivery-count."""
    client = redis_server.client()
    seeded = stuck(client, "loop", {"ok": (1, 1)})
    (key,) = seeded
    app_deliveries = 1
    for round_no in range(1, 10):
        before = client.xinfo_stream("loop")["last-generated-id"].decode()
        result = run_in_process(spark, requeue_args(
            redis_server.url, tmp_path, ["loop"], "claim.max_deliveries=3",
            run_id=f"round{round_no}"))
        assert result.code == 0, result.stderr
        if dead_letters(client, "loop"):
            break
        (copy_id, copy), = copies(client, "loop", before).values()
        assert int(copy[CARRIED]) == app_deliveries
        client.xreadgroup(GROUP, APP, {"loop": ">"})  # the application gets the copy ...
        app_deliveries += 1
        make_stuck(client, "loop", GROUP, APP, [copy_id], HOUR_MS)  # ... and never acks
    (letter,) = dead_letters(client, "loop")
    assert app_deliveries == 3, "dead-lettered after exactly max_deliveries deliveries"
    assert letter[b"x-delivery-count"] == b"4"  # 3 to the application, 1 the job's claim
    assert CARRIED not in letter and letter[b"n"] == b"0"
    assert pel(client, "loop", GROUP) == {} and key[2] not in pel(client, "loop", GROUP)
    # Redriven, it starts a new count, and says so.
    before = client.xinfo_stream("loop")["last-generated-id"].decode()
    assert redrive(redis_server, "streams.keys=loop").totals["redriven"] == 1
    ((_, redriven),) = client.xrange("loop", "(" + before)
    assert CARRIED not in redriven and redriven[b"x-redrive-count"] == b"1"
    assert {k: v for k, v in redriven.items() if k != b"x-redrive-count"} == \
        binary_fields(0, "ok")


@pytest.mark.slow
@ON_ONE_SERVER  # the requeue on every server: test_requeue_appends_one_copy_per_entry_and_acks_...
def test_a_retry_stream_per_group_keeps_each_groups_copies_apart(spark, server, tmp_path):
    client = server.client()
    seeded = stuck(client, "multi", {"ok": (5, 1)}, groups=("billing", "audit"))
    result = run_in_process(spark, requeue_args(
        server.url, tmp_path, ["multi"], "reprocess.requeue_stream={stream}:retry:{group}",
        run_id="per-group"))
    assert result.code == 0, result.stderr
    for group in ("billing", "audit"):
        target = requeue_key("multi", group, "{stream}:retry:{group}")
        assert target == "{multi}:retry:" + group
        assert len(copies(client, target)) == 5
    assert set(final_states(client, seeded).values()) == {"acked"}
    assert client.xlen("multi") == 5, "nothing appended to the source"


@pytest.mark.slow
@pytest.mark.parametrize(("extra", "fragments"), [
    ((), ["'multi'", "2 consumer groups (audit, billing)", "reprocess.requeue_stream"]),
    (("reprocess.requeue_stream={stream}:retry",), ["retry stream '{stream}:retry'",
                                                   "{stream}:retry:{group}"]),
])
def test_requeue_into_a_stream_every_group_reads_is_refused(spark, redis_server, tmp_path,
                                                            extra, fragments):
    client = redis_server.client()
    stuck(client, "multi", {"ok": (5, 1)}, groups=("audit", "billing"))
    before = {g: pel(client, "multi", g) for g in ("audit", "billing")}
    result = run_in_process(spark, requeue_args(redis_server.url, tmp_path, ["multi"], *extra,
                                                run_id="refused"))
    assert result.code == 2, result.stderr
    (line,) = result.error_lines()
    assert all(f in line for f in fragments), line
    assert {g: pel(client, "multi", g) for g in ("audit", "billing")} == before
    assert client.xlen("multi") == 5 and not client.exists(dead_letter_key("multi", ":dlq"))


@pytest.mark.parametrize(("override", "fragment"), [
    ("reprocess.mode=requeue_all", "reprocess.mode"),
    ("reprocess.requeue_stream=retry:{group}", "start it with {stream}"),
    ("reprocess.requeue_stream={stream}:{group}:{x}", "start it with {stream}"),
])
def test_bad_requeue_settings_exit_2_before_redis(override, fragment, tmp_path):
    result = run_in_process(None, job_args("redis://127.0.0.1:1/0", tmp_path, ["s"], override))
    assert result.code == 2, result.stderr
    (line,) = result.error_lines()
    assert fragment in line, line


@pytest.mark.slow
@pytest.mark.parametrize(("mode", "planned"), [("requeue", "would_requeue"),
                                               ("reassign", "would_reassign")])
@ON_ONE_SERVER  # the dry run on every server: test_dry_run_and_health's dry run
def test_dry_run_says_what_the_mode_would_do(spark, client, make_settings, mode, planned):
    stuck(client, "plan", {"ok": (3, 1), "poison": (2, 9)})
    settings = make_settings("streams.keys=plan", f"reprocess.mode={mode}",
                             "claim.max_deliveries=5")
    summary = run(spark, settings, dry_run=True)
    plan = {r.action for r in read_run(spark, settings.report.path, summary.run_id).collect()}
    assert plan == {planned, "would_dead_letter"}
    assert summary.totals[planned] == 3
    assert len(pel(client, "plan", GROUP)) == 5 and client.xlen("plan") == 5


@pytest.mark.slow
@pytest.mark.parametrize("faults_asked", [("claim 2 0",), ("apply 1 0", "apply 2 1")])
@ON_REDIS_VERSIONS  # a fault trial: 6.2's claim replies and 7.0's (Valkey answers as 7.2)
def test_task_retries_requeue_each_entry_once_and_report_it_once(
        spark, server, tmp_path, faults, faults_asked):
    """local[2,3]: tasks fail after a claim step, or after a requeue step's script ran (the
    worst moment), and are retried. Each entry still has exactly one copy, the originals are
    acked, and the report has one row per entry (entries a failed attempt already requeued
    are reported skipped by the retry: no longer pending)."""
    client = server.client()
    streams = ["rt-a", "rt-b{x}"]
    seeded = {}
    last = {}
    for stream in streams:
        seeded.update(stuck(client, stream, {"ok": (40, 1), "poison": (6, 9)}))
        last[stream] = client.xinfo_stream(stream)["last-generated-id"].decode()
    for line in faults_asked:
        faults(line)
    result = run_with_small_batches(spark, requeue_args(server.url, tmp_path, streams,
                                                        "claim.count=5", run_id="retried"))
    assert result.code == 0, result.stderr
    states = final_states(client, seeded)
    assert states == {k: "acked" if v == "ok" else "dead_lettered" for k, v in seeded.items()}
    rows = rows_by_key(report_rows(spark, tmp_path, "retried") or [])
    assert {k: len(v) for k, v in rows.items()} == dict.fromkeys(seeded, 1)
    skipped = [r[0] for r in rows.values() if r[0]["action"] == "skipped"]
    if any(f.startswith("apply") for f in faults_asked):  # the fault fired after side effects
        assert skipped and all("earlier attempt" in r["reason"] for r in skipped), skipped
    for stream in streams:
        made = copies(client, stream, last[stream])  # fails on a second copy of any entry
        assert len(made) == 40
        reported = {r[0]["requeued_id"] for k, r in rows.items() if k[0] == stream}
        assert reported - {None} <= {copy_id for copy_id, _ in made.values()}
