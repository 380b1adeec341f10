"""Journal rows across task attempts and runs (the journaled one pass, ``local[2,3]``, its
claim steps in recovery.executor.claim.journaled): the row a retried attempt restores from an
earlier attempt must still describe Redis, and a run ID whose journal is still in Redis is
refused.

Each case checks the report rows and Redis itself (the PEL, the dead-letter stream, what the
handler was handed). Faults, injected by recovery.executor.faults (the ``faults`` fixture
fails a test whose asked fault never fired): ``claim N A`` fails after claim step N of
attempt A is handed over (with ``claim.count`` equal to the Arrow batch size, a step is a
hand-over of its own); ``apply N A`` fails after hand-over N's side effects, before its rows
are journaled.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from recovery.executor.handover.lease import REASON_GONE
from recovery.redis_io.journal import (
    JournalConflictError,
    journal_key,
    open_journals,
    read,
    record_claims,
)
from tests.support.fault_tools import (
    dead_letter_index,
    handed_over,
    job_args,
    planned,
    report_rows,
    run_in_process,
    write_control,
)
from tests.support.invariants import pel
from tests.support.journal_rows_tools import (
    ACK,
    FAIL_ONCE,
    HANG_ONCE,
    attempts,
    entry_id,
    seed_stream,
)

GROUP = "g"
ROWS = 20  # Arrow batch size in these tests: a claim step of claim.count=ROWS is a hand-over
SETTINGS = (f"claim.count={ROWS}", "handler.path=tests.support.journal_rows_tools:scripted")


@pytest.fixture
def batches_of_rows(spark: SparkSession) -> Iterator[None]:
    key = "spark.sql.execution.arrow.maxRecordsPerBatch"
    spark.conf.set(key, str(ROWS))
    yield
    spark.conf.unset(key)


def _rows(spark: SparkSession, reports: Path, run_id: str) -> dict[str, dict[str, Any]]:
    """The run's report rows by entry ID (each entry exactly once)."""
    rows = report_rows(spark, reports, run_id)
    assert rows is not None, "no report"
    by_id = {r["id"]: r for r in rows}
    assert len(by_id) == len(rows), "an entry reported twice"
    return by_id


def _retried_run(spark: SparkSession, url: str, reports: Path, stream: str,
                 faults: Callable[[str], None], fault_lines: tuple[str, ...], *settings: str,
                 plan: bool = False) -> dict[str, dict[str, Any]]:
    """A run of `stream` (run ID ``retried``; with `plan`, of a dry run's plan made first)
    whose tasks fail at `fault_lines`: exit 0, the report rows by ID."""
    plan_args = planned(spark, url, reports, [stream], *SETTINGS, *settings) if plan else []
    for line in fault_lines:
        faults(line)
    result = run_in_process(spark, [*job_args(url, reports, [stream], *SETTINGS, *settings,
                                              run_id="retried"), *plan_args])
    assert result.code == 0, result.stderr[-3000:]
    return _rows(spark, reports, "retried")


# --- part 3: an attempt killed between its side effect and its record --------------------

@pytest.mark.slow
@pytest.mark.parametrize("outcome", ["acked", "dead_lettered"])
def test_an_entry_a_later_attempt_finished_unrecorded_is_not_reported_as_failed(
        spark, redis_server, tmp_path, faults, batches_of_rows, outcome):
    """Attempt 0 journals entry e as failed (stays pending), then fails; attempt 1 takes e
    back, acks it (the handler now succeeds) or dead-letters it at the limit (attempt 0's
    handler call timed out on the entry before e, so e was not handed over then, and that
    entry stayed pending, its call abandoned but maybe running), and
    fails before journaling that; attempt 2 finds e gone. The report must not say
    ``failed``: e is ``skipped`` (no longer pending), as are the entries attempt 1 took back
    with it; every other row is as recorded."""
    client = redis_server.client()
    stream = "r3"
    e, hung, behind = 11, 10, range(12, ROWS)
    if outcome == "acked":
        seed_stream(client, stream, GROUP, 2 * ROWS, {e: {FAIL_ONCE: b"1"}})
        extra: tuple[str, ...] = ()
    else:  # delivered 4 times: 5 with the run's claim, max_deliveries 5
        seed_stream(client, stream, GROUP, 2 * ROWS,
                    {hung: {HANG_ONCE: b"1"}, e: {b"fail": b"1"}}, {hung: 4, e: 4})
        extra = ("handler.batch_size=1", "handler.timeout_s=1")
    write_control(redis_server.url, hang_s=2)
    # Attempt 0 fails once hand-over 1 (entries 0-19) is journaled; attempt 1's hand-over 1
    # is entries 20-39, its 2nd what attempt 0 left pending.
    rows = _retried_run(spark, redis_server.url, tmp_path, stream, faults,
                        ("claim 1 0", "apply 2 1"), *extra)

    assert attempts(client) == {0, 1}, "the faults did not fire as asked"
    handed = handed_over(client)
    letters = dead_letter_index(client, [stream])
    assert pel(client, stream, GROUP) == {}, "an entry is still pending"
    key = (stream, GROUP, entry_id(e))
    assert handed[key] == (2 if outcome == "acked" else 1)
    assert (key in letters) == (outcome == "dead_lettered")
    if outcome == "dead_lettered":
        assert letters[key][1][b"x-run-id"] == b"retried"
        # Attempt 0's call on `hung` timed out at the limit: never dead-lettered while it may
        # still run (recovery.executor.handover.abandoned); a later attempt acked it.
        assert rows[entry_id(hung)]["action"] == "skipped", rows[entry_id(hung)]
        assert (stream, GROUP, entry_id(hung)) not in letters
        for i in behind:  # not handed over in attempt 0, acked by attempt 1
            assert rows[entry_id(i)]["action"] == "skipped", rows[entry_id(i)]
            assert handed[(stream, GROUP, entry_id(i))] == 1
    assert rows[entry_id(e)]["action"] == "skipped", rows[entry_id(e)]
    assert rows[entry_id(e)]["reason"] == REASON_GONE
    special = {e, hung, *behind} if outcome == "dead_lettered" else {e}
    for i in set(range(2 * ROWS)) - special:
        assert rows[entry_id(i)]["action"] == "reprocessed", rows[entry_id(i)]
        assert handed[(stream, GROUP, entry_id(i))] == 1


# --- part 4: --plan, a retried task restores what its earlier attempt recorded -------------

@pytest.mark.slow
@pytest.mark.parametrize("plan", [False, True], ids=["idle-claim", "plan"])
def test_a_retried_task_reports_what_its_earlier_attempt_recorded(
        spark, redis_server, tmp_path, faults, batches_of_rows, plan):
    """Attempt 0 acks entries 0-19, journals their rows and fails; attempt 1 finds them no
    longer pending (with ``--plan``: planned IDs no longer pending) and reports them as
    attempt 0 recorded: ``reprocessed``, not ``skipped``."""
    client = redis_server.client()
    stream = "r4"
    seed_stream(client, stream, GROUP, 2 * ROWS)
    write_control(redis_server.url)
    rows = _retried_run(spark, redis_server.url, tmp_path, stream, faults, ("claim 1 0",),
                        plan=plan)
    assert attempts(client) == {0, 1}, "the fault did not fire"
    handed = handed_over(client)
    assert pel(client, stream, GROUP) == {}
    for i in range(2 * ROWS):
        assert rows[entry_id(i)]["action"] == "reprocessed", rows[entry_id(i)]
        assert handed[(stream, GROUP, entry_id(i))] == 1


# --- the same class: a row that stopped being true between attempts ------------------------

@pytest.mark.slow
@pytest.mark.parametrize("plan", [False, True], ids=["idle-claim", "plan"])
def test_a_failed_row_is_not_restored_for_an_entry_acked_since(
        spark, redis_server, tmp_path, faults, batches_of_rows, plan):
    """Attempt 0 journals entry e as failed (stays pending); in its next hand-over a live
    consumer acks e (the handler of entry 25 does, as one would); then attempt 0 fails.
    Attempt 1 finds e no longer pending: it reports it ``skipped``, not ``failed``."""
    client = redis_server.client()
    stream = "r5"
    e, acker = 5, 25
    seed_stream(client, stream, GROUP, 2 * ROWS,
                {e: {b"fail": b"1"}, acker: {ACK: entry_id(e).encode()}})
    write_control(redis_server.url)
    # Attempt 0 fails once hand-over 2 (entries 20-39) is journaled.
    rows = _retried_run(spark, redis_server.url, tmp_path, stream, faults, ("claim 2 0",),
                        plan=plan)
    assert pel(client, stream, GROUP) == {}
    assert dead_letter_index(client, [stream]) == {}
    assert handed_over(client)[(stream, GROUP, entry_id(e))] == 1
    assert rows[entry_id(e)]["action"] == "skipped", rows[entry_id(e)]
    for i in set(range(2 * ROWS)) - {e}:
        assert rows[entry_id(i)]["action"] == "reprocessed", rows[entry_id(i)]


# --- part 5: a run ID whose journal is still in Redis ---------------------------------------

@pytest.mark.slow
def test_a_run_id_whose_journal_is_still_in_redis_is_refused(spark, redis_server, tmp_path):
    """A run with ID ``reused`` was killed after its tasks: its journal is still in Redis and
    its consumer still owns the 3 entries it claimed. A run with the same ``--run-id`` is
    refused (exit 2, one line naming the run ID and the fix) with nothing touched: journal,
    TTL, PEL as they were, nothing handed over. A run with a new ID then finishes every
    entry, the killed run's included."""
    client = redis_server.client()
    stream = "r6"
    ids = seed_stream(client, stream, GROUP, 6)
    killed = "recovery-reused-0"
    client.xclaim(stream, GROUP, killed, 0, ids[3:], idle=3_600_000, justid=True)
    key = journal_key("recovery:journal:", killed)
    assert open_journals(client, [key], "reused") is None
    record_claims(client, key, [((stream, GROUP), ids[3:])])
    client.expire(key, 1000)
    journal, pending = client.lrange(key, 0, -1), pel(client, stream, GROUP)
    write_control(redis_server.url)
    args = job_args(redis_server.url, tmp_path, [stream], *SETTINGS)
    refused = run_in_process(spark, [*args, "--run-id", "reused"])
    assert refused.code == 2, refused.stderr[-3000:]
    (line,) = refused.error_lines()
    assert "reused" in line and key in line and "--run-id" in line, line
    assert client.lrange(key, 0, -1) == journal
    assert 0 < client.ttl(key) <= 1000
    assert pel(client, stream, GROUP) == pending
    assert handed_over(client) == {}
    assert report_rows(spark, tmp_path, "reused") is None

    fresh = run_in_process(spark, [*args, "--run-id", "fresh"])
    assert fresh.code == 0, fresh.stderr[-3000:]
    assert pel(client, stream, GROUP) == {}
    rows = _rows(spark, tmp_path, "fresh")
    assert {i: r["action"] for i, r in rows.items()} == dict.fromkeys(ids, "reprocessed")
    assert rows[ids[5]]["previous_consumer"] == killed
    assert client.lrange(key, 0, -1) == journal, "a fresh run touched another run's journal"


def test_a_journal_with_two_headers_is_not_read_as_one_runs(redis_server):
    """Two runs' elements in one journal (a run ID reused while the other run's journal was
    still there) are refused by the retried attempt's read, not mixed into its report."""
    client = redis_server.client()
    key = journal_key("recovery:journal:", "recovery-twice-0")
    assert open_journals(client, [key], "twice") is None
    record_claims(client, key, [(("s", GROUP), ["1-0"])])
    assert read(client, key).claimed == {("s", GROUP): {"1-0": 1}}
    assert open_journals(client, [key], "twice") is None
    with pytest.raises(JournalConflictError, match=f"{key} holds the elements of two runs"):
        read(client, key)


@pytest.mark.slow
def test_a_third_attempt_keeps_the_first_attempts_rows_that_the_second_passed_on(
        spark, redis_server, tmp_path, faults, batches_of_rows):
    """Attempt 0 acks the first unit's entries 0-19, journals their rows and fails. Attempt
    1 reports them as recorded (``reprocessed``), hands over the rest of that unit and the
    first step of the other, and fails before journaling that step. Attempt 2 must still
    report entries 0-19 of the first unit ``reprocessed`` (attempt 1 journaled them with
    attempt 0's rows, not as ``skipped``), the other unit's step attempt 1 did not record
    ``skipped``, everything else ``reprocessed``."""
    client = redis_server.client()
    streams = ["r7a", "r7b"]
    for stream in streams:
        seed_stream(client, stream, GROUP, 2 * ROWS)
    write_control(redis_server.url)
    faults("claim 1 0")  # after the first unit's entries 0-19 are journaled
    faults("apply 3 1")  # after hand-overs: 20-39, 0-19 as recorded, the other unit's 0-19
    result = run_in_process(spark, job_args(redis_server.url, tmp_path, streams, *SETTINGS,
                                            "spark.partitions=1", run_id="retried"))
    assert result.code == 0, result.stderr[-3000:]
    assert attempts(client) == {0, 1, 2}, "the faults did not fire as asked"
    rows = report_rows(spark, tmp_path, "retried")
    assert rows is not None and len(rows) == 4 * ROWS
    handed = handed_over(client)
    for stream in streams:
        assert pel(client, stream, GROUP) == {}
        for i in range(2 * ROWS):
            assert handed[(stream, GROUP, entry_id(i))] == 1
    # Which unit the task took first is the assigner's choice: one of each, in either order.
    not_reprocessed = [{r["id"]: r["action"] for r in rows
                        if r["stream"] == s and r["action"] != "reprocessed"} for s in streams]
    assert sorted(not_reprocessed, key=len) == [
        {}, {entry_id(i): "skipped" for i in range(ROWS)}], not_reprocessed
