"""Attacks on applying a dry run's plan (``--plan``, ``redis-stream-recovery apply``) in the
requeue and reassign modes: the driver's checks of a mode (``check_stream``,
``check_units``, ``check_targets``) must refuse on the plan path what they refuse in a plain
run. Through the job's command line (in-process, the suite's session), checked in Redis
(XPENDING, XLEN, EXISTS) afterwards."""

from __future__ import annotations

import pytest
from redis import Redis

from recovery.redis_io.dlq_names import refused_requeue_reason
from recovery.redis_io.error_codes import TargetRefused
from tests.support.fault_tools import GROUP, job_args, planned, report_rows, run_in_process
from tests.support.invariants import pel
from tests.support.reprocess_tools import copies, stuck
from tests.support.servers import start_server

pytestmark = pytest.mark.slow

# Names only discovery can tell clash (the settings' check probes no stream named "{b}"):
# b / dlq:h is requeued into "{b}:dlq:h", which is where {b} / h dead-letters.
CLASHING = ("reprocess.requeue_stream={stream}:{group}",
            "dead_letter.stream={stream}:dlq:{group}")


def test_an_applied_plan_never_requeues_into_another_units_dead_letter_stream(
        spark, redis_server, tmp_path):
    """Found: ``check_units`` did not run on the plan path. A dry run made without a retry
    stream, then applied with ``reprocess.requeue_stream`` and ``dead_letter.stream``
    naming the same key for two units (a plain run with them: exit 2), acked b's entries
    and appended their copies to ``{b}:dlq:h``, {b} / h's dead-letter stream, next to its
    letters. Now refused the same way (exit 2), nothing claimed or written."""
    client: Redis = redis_server.client()
    stuck(client, "b", {"ok": (2, 1)}, groups=("dlq:h",))
    stuck(client, "{b}", {"ok": (2, 1), "poison": (1, 9)}, groups=("h",))
    streams = ["b", "{b}"]
    plain = run_in_process(spark, job_args(redis_server.url, tmp_path, streams,
                                           "reprocess.mode=requeue", *CLASHING))
    assert plain.code == 2 and "{b}:dlq:h" in plain.stderr, plain.stderr[-2000:]
    plan = planned(spark, redis_server.url, tmp_path, streams, "reprocess.mode=requeue")

    applied = run_in_process(spark, [*job_args(redis_server.url, tmp_path, streams,
                                               "reprocess.mode=requeue", *CLASHING), *plan])

    assert applied.code == 2, applied.stderr[-2000:]
    assert "{b}:dlq:h" in applied.stderr and applied.summary["exit_code"] == 2
    assert client.xpending("b", "dlq:h")["pending"] == 2
    assert client.xpending("{b}", "h")["pending"] == 3
    assert client.exists("{b}:dlq:h") == 0
    assert (client.xlen("b"), client.xlen("{b}")) == (2, 3)


def _group_on_source(client: Redis) -> None:
    client.xgroup_create("s", "audit", id="0")


def _groups_on_target(client: Redis) -> None:
    for group in ("shipping", "audit"):
        client.xgroup_create("{s}:r", group, id="0", mkstream=True)


@pytest.mark.parametrize(("template", "since_the_plan", "told"), [
    ((), _group_on_source, "2 consumer groups (audit, g)"),
    (("reprocess.requeue_stream={stream}:r",), _groups_on_target, "'{s}:r'"),
], ids=["source-gained-a-group", "retry-stream-gained-groups"])
def test_an_applied_plan_refuses_a_target_every_group_would_read_again(
        spark, redis_server, tmp_path, template, since_the_plan, told):
    """Held: a requeue target that gained consumer groups between the dry run and its
    apply (the source itself, or the retry stream) is refused on the plan path as in a plain
    run: exit 2, nothing claimed, nothing appended."""
    client: Redis = redis_server.client()
    stuck(client, "s", {"ok": (2, 1)})
    args = job_args(redis_server.url, tmp_path, ["s"], "reprocess.mode=requeue", *template)
    plan = planned(spark, redis_server.url, tmp_path, ["s"], "reprocess.mode=requeue",
                   *template)
    since_the_plan(client)
    lengths = {key: client.xlen(key) for key in ("s", "{s}:r")}

    applied = run_in_process(spark, [*args, *plan])

    assert applied.code == 2 and told in applied.stderr, applied.stderr[-2000:]
    assert client.xpending("s", "g")["pending"] == 2
    assert {key: client.xlen(key) for key in lengths} == lengths


def test_an_applied_plan_leaves_entries_pending_behind_a_target_of_another_type(
        spark, redis_server, tmp_path):
    """Held: a retry stream name taken by a hash between the dry run and its apply: the
    requeue script refuses it, as in a plain run; the entries stay pending (on the job's
    consumer), the hash is untouched, status partial with the reason."""
    client: Redis = redis_server.client()
    stuck(client, "s", {"ok": (2, 1)})
    template = ("reprocess.mode=requeue", "reprocess.requeue_stream={stream}:r")
    plan = planned(spark, redis_server.url, tmp_path, ["s"], *template)
    client.hset("{s}:r", "owner", "another app")

    applied = run_in_process(spark, [*job_args(redis_server.url, tmp_path, ["s"], *template),
                                     *plan])

    assert applied.code == 0, applied.stderr[-2000:]
    assert applied.summary["status"] == "partial"
    assert any("{s}:r" in s["reason"] for s in applied.summary["skipped"])
    assert client.xpending("s", "g")["pending"] == 2 and client.xlen("s") == 2
    assert client.hgetall("{s}:r") == {b"owner": b"another app"}


@pytest.mark.parametrize(("flavor", "journal"), [("redis", "recovery:journal:"),
                                                 ("redis62", "")],
                         ids=["journaled-7.0", "materialised-6.2"])
def test_an_applied_requeue_plan_whose_tasks_fail_after_their_writes_requeues_each_once(
        spark, tmp_path, faults, small_batches, flavor, journal):
    """Held: a requeue plan applied with every task's first attempt failing after its first
    hand-over step's writes and its second after its second step's (``apply 1 0``,
    ``apply 2 1``; batches of 20): the retried attempts take the plan's entries back and
    requeue each of the 60 exactly once (no two copies of one entry in the retry stream),
    dead-letter each of the 10 poison entries once, leave nothing pending, and report each
    entry once (the steps whose writes went unrecorded: ``skipped``, no longer pending, as
    docs/GUARANTEES.md says of retried tasks)."""
    with start_server(flavor) as server:
        client = server.client()
        stuck(client, "rq", {"ok": (60, 1), "poison": (10, 9)})
        settings = ("reprocess.mode=requeue", "reprocess.requeue_stream={stream}:r",
                    "claim.count=5", f"claim.journal_prefix={journal}")
        plan = planned(spark, server.url, tmp_path, ["rq"], *settings)
        faults("apply 1 0")
        faults("apply 2 1")

        result = run_in_process(spark, [*job_args(server.url, tmp_path, ["rq"], *settings,
                                                  run_id="retried"), *plan])

        assert result.code == 0, result.stderr[-2000:]
        assert len(copies(client, "{rq}:r")) == 60  # copies() fails on two of one entry
        letters = [f[b"x-original-id"] for _, f in client.xrange("{rq}:dlq")]
        assert len(letters) == len(set(letters)) == 10
        assert pel(client, "rq", GROUP) == {} and client.xlen("rq") == 70
        rows = report_rows(spark, tmp_path, "retried") or []
        assert len(rows) == len({r["id"] for r in rows}) == 70
        assert {r["action"] for r in rows} <= {"requeued", "dead_lettered", "skipped"}


def test_a_retry_stream_that_holds_dead_letters_is_refused_planned_applied_and_plain(
        spark, redis_server, tmp_path):
    """Found: ``{s}:r``, a stream of dead letters (a suffix the job used before), named by
    ``reprocess.requeue_stream``: the requeue script checked only the target's type, so a
    run (plain or applying a plan) appended s's copies after the letters, exit 0, status ok,
    and the dry run planned it without a word. Now: the dry run lists the unit as a real
    run would skip it, and the script refuses the target (nothing written or acked, status
    partial) in a plan's apply (stream s) and a plain run (stream t) alike."""
    client: Redis = redis_server.client()
    for stream in ("s", "t"):
        stuck(client, stream, {"ok": (2, 1)})
        for n in range(2):
            client.xadd(f"{{{stream}}}:r", {
                "payload": str(n), "x-original-stream": stream, "x-original-group": "g",
                "x-original-id": f"1-{n}", "x-death-reason": "max-deliveries-exceeded",
                "x-run-id": "old"})
    settings = ("reprocess.mode=requeue", "reprocess.requeue_stream={stream}:r")
    dry = run_in_process(spark, [*job_args(redis_server.url, tmp_path, ["s"], *settings),
                                 "--dry-run"])
    assert dry.code == 0, dry.stderr[-2000:]
    assert [s["reason"] for s in dry.summary["skipped"] if s["group"] == "g"] == \
        [refused_requeue_reason("{s}:r", TargetRefused("stream", "it holds dead letters"))]

    for stream, plan in (("s", ["--plan", dry.summary["report_path"]]), ("t", [])):
        result = run_in_process(spark, [*job_args(redis_server.url, tmp_path, [stream],
                                                  *settings), *plan])
        assert result.code == 0 and result.summary["status"] == "partial", result.summary
        assert any("holds dead letters" in s["reason"] for s in result.summary["skipped"])
        assert client.xpending(stream, "g")["pending"] == 2 and client.xlen(stream) == 2
        assert client.xlen(f"{{{stream}}}:r") == 2


def test_a_stream_no_retry_stream_can_be_named_for_is_skipped_planned_applied_and_plain(
        spark, redis_server, tmp_path):
    """Found: ``a}b`` (a ``}`` but no hash tag) with ``dead_letter.stream`` set, so its
    dead-letter name exists, and ``reprocess.requeue_stream``, which has no name for it: the
    run claimed its entries, dead-lettered its poison entry, then every attempt of the task
    failed naming the retry stream (DeadLetterNameError), and the run ended with exit 2, its
    entries left on the job's consumer, the other stream unprocessed. Now: ``a}b`` is
    skipped before anything is claimed (its entries stay with their owner), in a plain run
    and in a plan made without a retry stream and applied with one; the other stream is
    requeued."""
    client: Redis = redis_server.client()
    streams = ["a}b", "n"]
    for stream in streams:
        stuck(client, stream, {"ok": (2, 1), "poison": (1, 9)})
    named = ("reprocess.mode=requeue", "dead_letter.stream={stream}:dlq")
    plan = planned(spark, redis_server.url, tmp_path, streams, *named)
    retry = (*named, "reprocess.requeue_stream={stream}:r")

    for run in (plan, []):
        result = run_in_process(spark, [*job_args(redis_server.url, tmp_path, streams, *retry),
                                        *run])
        assert result.code == 0, result.stderr[-2000:]
        [skip] = [s for s in result.summary["skipped"] if s["stream"] == "a}b"]
        assert "reprocess.requeue_stream" in skip["reason"], skip
        assert result.summary["status"] == "partial"
        pending = client.xpending("a}b", "g")
        assert pending["pending"] == 3 and pending["consumers"] == [
            {"name": b"worker-dead", "pending": 3}]
        assert client.exists("a}b:dlq") == 0
    assert client.xpending("n", "g")["pending"] == 0
    assert client.xlen("{n}:r") == 2 and client.xlen("n:dlq") == 1
