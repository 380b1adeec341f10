"""Attacks on a hand-over script call whose reply is lost (ReplyDropper: the script ran, its
reply thrown away, the connection closed) and that redis-py sends again: the second sending
finds what the first one did no longer pending and answers 0. Through the job's command
line (in-process), checked in Redis (XRANGE, XPENDING).

Found: in the requeue and reassign modes those entries were reported ``skipped`` as acked
by someone else, status ok and no warning, while Redis showed them requeued / reassigned by
the run. Found: an entry of the call taken meanwhile by a consumer whose name is not UTF-8
made the re-read fail (UnicodeDecodeError); the task was retried and every entry of the
call was reported ``skipped`` as acked elsewhere, exit 0, the moved ones too. Found:
uncertain entries were told only in a summary warning and a log line (status ok, exit 0; in
the metrics lumped into ``run_entries{action="skipped"}`` with the entries live consumers
acked): no alert could tell them apart. Now counted in the summary's ``uncertain`` and the
``run_uncertain_entries`` gauge.

Held: a dead-letter stream shared by two sources with the same entry IDs and another run's
letters of them; the requeue and reassign re-reads on every server (Redis 6.2, 7.0, 8.0,
8.6, Valkey 8.1, 9.1); a dead-letter stream trimmed or deleted by another client between
the lost reply and the re-read (the moved entries reported uncertain, never acked elsewhere
or dead-lettered without their letter)."""

from __future__ import annotations

import time

import pytest
from redis import Redis

from recovery.metrics.families import PREFIX, run_registry
from recovery.metrics.recovery_run import recovery_facts
from recovery.redis_io import scripts
from recovery.report.summary import RunSummary
from recovery.schemas import UNCERTAIN_REASON_PREFIX
from recovery.settings.model import load_settings
from recovery.testing.backlog import make_stuck
from tests.support.acting_proxy import ActingProxy
from tests.support.backlogs import DEAD, HOUR_MS
from tests.support.fault_tools import GROUP, JobResult, job_args, report_rows, run_in_process
from tests.support.invariants import pel
from tests.support.lost_reply import ReplyDropper
from tests.support.reprocess_tools import LIVE, WINDOW_MS, kept_alive, seen_now, stuck
from tests.support.servers import FLAVORS, NEWEST, start_server

pytestmark = pytest.mark.slow
EVERY_SERVER = pytest.mark.parametrize("flavor", (*FLAVORS, *NEWEST))


def lost_reply_run(spark, client: Redis, port: int, script: str, tmp_path, stream: str,
                   *settings: str, run_id: str) -> JobResult:
    """The job in-process (`settings`, on `stream`) through a proxy that loses the first
    reply to `script`'s calls."""
    sha = client.script_load(scripts._source(script)).encode()
    proxy = ReplyDropper(port, sha)
    try:
        result = run_in_process(spark, job_args(proxy.url(), tmp_path, [stream], *settings,
                                                run_id=run_id))
    finally:
        proxy.close()
    assert proxy.dropped == 1, "the fault did not happen"
    assert result.code == 0, result.stderr[-3000:]
    return result


def uncertain_and_warned(row: dict, result: JobResult) -> bool:
    """A row the run says it cannot tell, with the summary warning an alert can see."""
    return row["action"] == "skipped" and row["reason"].startswith(UNCERTAIN_REASON_PREFIX) \
        and any("uncertain" in w for w in result.summary["warnings"])


def counted_uncertain(rows: list[dict], result: JobResult) -> int:
    """The uncertain rows, checked against the summary's ``uncertain`` count and the gauge
    the run would push (``run_uncertain_entries``) for it."""
    uncertain = sum(r["action"] == "skipped" and r["reason"].startswith(UNCERTAIN_REASON_PREFIX)
                    for r in rows)
    assert result.summary["uncertain"] == uncertain, result.summary
    settings = load_settings(None, ["streams.keys=s"])
    summary = RunSummary("r", uncertain=result.summary["uncertain"])
    registry = run_registry(recovery_facts(settings, summary, 0, 0.0)[0], 10)
    assert registry.get_sample_value(PREFIX + "run_uncertain_entries") == uncertain
    return uncertain


@EVERY_SERVER
def test_a_lost_requeue_reply_never_reports_a_requeued_entry_as_acked_elsewhere(spark,
                                                                               tmp_path,
                                                                               flavor):
    with start_server(flavor) as server:
        client = server.client()
        seeded = {k[2] for k in stuck(client, "rq", {"ok": (3, 1)})}
        result = lost_reply_run(spark, client, server.port, "requeue", tmp_path, "rq",
                                "reprocess.mode=requeue", run_id="rqlost")
        assert pel(client, "rq", GROUP) == {}
        copies = [i.decode() for i, _ in client.xrange("rq") if i.decode() not in seeded]
        assert len(copies) == len(seeded), "each entry requeued once"
        rows = report_rows(spark, tmp_path, "rqlost") or []
        assert {r["id"] for r in rows} == seeded
        for row in rows:
            assert (row["action"] == "requeued" and row["requeued_id"] in copies) \
                or uncertain_and_warned(row, result), row
        counted_uncertain(rows, result)


@EVERY_SERVER
def test_a_lost_reassign_reply_never_reports_a_reassigned_entry_as_acked_elsewhere(spark,
                                                                                 tmp_path,
                                                                                 flavor):
    with start_server(flavor) as server:
        client = server.client()
        seeded = {k[2] for k in stuck(client, "ra", {"ok": (4, 1)})}
        time.sleep(WINDOW_MS / 1000 + 0.5)  # the dead consumer no longer live
        for consumer in LIVE:
            seen_now(client, "ra", consumer)
        with kept_alive(server.client(), ["ra"], LIVE):
            result = lost_reply_run(spark, client, server.port, "reassign", tmp_path, "ra",
                                    "reprocess.mode=reassign",
                                    f"reprocess.live_within_ms={WINDOW_MS}", run_id="ralost")
        owners = {i: p.consumer for i, p in pel(client, "ra", GROUP).items() if i in seeded}
        assert set(owners) == seeded and set(owners.values()) == set(LIVE)
        rows = report_rows(spark, tmp_path, "ralost") or []
        assert {r["id"] for r in rows} == seeded
        for row in rows:
            assert (row["action"] == "reassigned" and row["reassigned_to"] == owners[row["id"]]) \
                or uncertain_and_warned(row, result), row
        counted_uncertain(rows, result)


def test_a_lost_reply_into_a_shared_dead_letter_stream_finds_each_sources_own_letter(
        spark, tmp_path):
    """Two sources with the same entry IDs, one dead-letter stream for both
    (``dead_letter.stream``) already holding another run's letters of those IDs: each entry
    is reported with the letter this run wrote of it, from its own source."""
    with start_server("redis") as server:
        client = server.client()
        ids = ["1-1", "1-2", "1-3"]
        for stream in ("sa", "sb"):
            for entry_id in ids:
                client.xadd(stream, {"n": entry_id, "kind": "poison"}, id=entry_id)
            client.xgroup_create(stream, GROUP, id="0")
            client.xreadgroup(GROUP, DEAD, {stream: ">"})
            make_stuck(client, stream, GROUP, DEAD, ids, HOUR_MS, 9)
            for entry_id in ids:  # another run's letters of the same IDs
                client.xadd("CDL", {"x-original-stream": stream, "x-original-group": GROUP,
                                    "x-original-id": entry_id, "x-death-reason": "r",
                                    "x-run-id": "older"})
        sha = client.script_load(scripts._source("dead_letter")).encode()
        proxy = ReplyDropper(server.port, sha)
        try:
            result = run_in_process(spark, job_args(
                proxy.url(), tmp_path, ["sa", "sb"], "dead_letter.stream=CDL",
                "claim.journal_prefix=", run_id="shared"))
        finally:
            proxy.close()
        assert proxy.dropped == 1, "the fault did not happen"
        assert result.code == 0, result.stderr[-3000:]
        mine = {(f[b"x-original-stream"].decode(), f[b"x-original-id"].decode()): i.decode()
                for i, f in client.xrange("CDL") if f[b"x-run-id"] == b"shared"}
        assert sorted(mine) == [(s, i) for s in ("sa", "sb") for i in ids]
        assert client.xlen("CDL") == 12  # each entry moved once
        rows = report_rows(spark, tmp_path, "shared") or []
        assert {(r["stream"], r["id"]): (r["action"], r["dead_letter_id"]) for r in rows} == \
            {key: ("dead_lettered", letter) for key, letter in mine.items()}


@pytest.mark.parametrize("flavor", ["redis", "redis62"])
@pytest.mark.parametrize("gone", [("XTRIM", "{ev}:dlq", "MAXLEN", "0"), ("DEL", "{ev}:dlq")],
                         ids=["trimmed", "deleted"])
def test_letters_trimmed_before_the_reread_leave_their_entries_uncertain(spark, tmp_path,
                                                                         flavor, gone):
    """Another client trims (or deletes) the dead-letter stream after the lost call moved
    three entries and before the job sent it again: their letters are gone, the re-read
    finds none of this run's, and each is reported uncertain with the warning (neither
    ``dead_lettered`` with an ID Redis no longer has nor acked by someone else); the entries
    requeued in the same run are unaffected."""
    with start_server(flavor) as server:
        client = server.client()
        kinds = stuck(client, "ev", {"poison": (3, 9), "ok": (2, 1)})
        sha = client.script_load(scripts._source("dead_letter")).encode()
        proxy = ReplyDropper(server.port, sha, after=[gone])
        try:
            result = run_in_process(spark, job_args(proxy.url(), tmp_path, ["ev"],
                                                    "reprocess.mode=requeue", run_id="gone"))
        finally:
            proxy.close()
        assert proxy.dropped == 1, "the fault did not happen"
        assert result.code == 0, result.stderr[-3000:]
        assert pel(client, "ev", GROUP) == {}
        assert client.exists("{ev}:dlq") == 0 or client.xlen("{ev}:dlq") == 0, "not trimmed"
        assert client.xlen("ev") == 5 + 2  # the two requeued copies
        rows = {r["id"]: r for r in report_rows(spark, tmp_path, "gone") or []}
        assert set(rows) == {k[2] for k in kinds}
        for (_, _, entry_id), kind in kinds.items():
            row = rows[entry_id]
            assert uncertain_and_warned(row, result) if kind == "poison" else \
                row["action"] == "requeued", row
        assert counted_uncertain(list(rows.values()), result) == 3


@pytest.mark.parametrize(("script", "kind"), [("requeue", {"ok": (3, 1)}),
                                              ("dead_letter", {"poison": (3, 9)})])
def test_a_lost_reply_reread_reads_an_owner_whose_name_is_not_utf8(spark, tmp_path, script,
                                                                   kind):
    """Just before the call (``ActingProxy``, in front of the ``ReplyDropper``) a consumer
    named ``\\xff\\xfe`` takes one of its entries; the call's reply is lost. The re-read
    finds that entry pending for it (left alone, still its) and the others moved by the
    lost call: requeued or uncertain, dead-lettered with the letter's ID."""
    with start_server("redis") as server:
        client = server.client()
        taken, *moved = sorted(k[2] for k in stuck(client, "bn", kind))
        sha = client.script_load(scripts._source(script)).encode()
        dropper = ReplyDropper(server.port, sha)
        acting = ActingProxy(dropper.port, [sha],
                             [("XCLAIM", "bn", GROUP, b"\xff\xfe", 0, taken)])
        try:
            result = run_in_process(spark, job_args(acting.url(), tmp_path, ["bn"],
                                                    "reprocess.mode=requeue", run_id="bin"))
        finally:
            acting.close()
            dropper.close()
        assert (acting.acted, dropper.dropped) == (1, 1), "the faults did not happen"
        assert result.code == 0, result.stderr[-3000:]
        [row] = client.xpending_range("bn", GROUP, "-", "+", 10)
        assert (row["message_id"].decode(), row["consumer"]) == (taken, b"\xff\xfe")
        rows = {r["id"]: r for r in report_rows(spark, tmp_path, "bin") or []}
        assert set(rows) == {taken, *moved}
        assert rows[taken]["action"] == "skipped"
        assert rows[taken]["reason"].startswith("no longer pending for the job's consumer")
        letters = {f[b"x-original-id"].decode(): i.decode()
                   for i, f in client.xrange("{bn}:dlq")} if script == "dead_letter" else {}
        for entry_id in moved:
            row = rows[entry_id]
            assert (row["action"], row["dead_letter_id"]) == ("dead_lettered", letters[entry_id]) \
                if letters else uncertain_and_warned(row, result), row
