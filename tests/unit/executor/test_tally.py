"""Tallies (recovery.executor.tally): the run's summary and, in one pass, the PEL
histograms (the last read of each unit: recovery.executor.claim.left_counts), counted on the
executors. The partition functions run in this process against real servers, no Spark:
what they count is checked against Redis and against the health pass on the same PEL."""

from __future__ import annotations

from collections import Counter

import pyarrow as pa
import pytest
from redis import Redis

from recovery.errors import TARGET_REFUSED
from recovery.executor.claim.backoff import NotDue
from recovery.executor.claim.loop import examined
from recovery.executor.handover.modes import ACTIONS
from recovery.executor.handover.resent import REASON_UNCERTAIN
from recovery.executor.partitions import recover_partition
from recovery.executor.survey import histogram_partition
from recovery.executor.tally import (
    TALLY,
    Tally,
    histogram_rows,
    not_due_counts,
    read_tallies,
    refused_units,
    tallied,
    uncertain_moves,
    unit_counts,
)
from recovery.redis_io.autoclaim import ClaimBatch
from recovery.redis_io.dlq_names import dead_letter_key
from recovery.rows import UnitCounts
from recovery.schemas import UNIT, arrow
from recovery.settings.model import executor_params
from recovery.testing.backlog import add_entries, deliver, make_stuck
from tests.support.backlogs import DEAD, HOUR_MS, LIVE, binary_fields, seed

STREAM, GROUP, JOB = "orders", "billing", "recovery-t1-0"


def report_batch(rows: list[tuple[str, str, str]]) -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist(
        [{"stream": s, "group": g, "action": a} for s, g, a in rows])


def test_tallies_count_every_action_per_unit_across_tasks():
    first, second = Tally(), Tally()
    first.count(report_batch([("a", "g", "reprocessed")] * 2 + [("a", "g", "failed"),
                                                                  ("b", "g", "deleted")]))
    first.count(report_batch([("a", "g", "reprocessed")]))
    first.count(report_batch([]))
    second.count(report_batch([("a", "g", "dead_lettered"), ("a", "h", "skipped")]))
    counts = unit_counts(read_tallies([first.to_json(), second.to_json()]), ACTIONS)
    zero = dict.fromkeys(ACTIONS, 0)
    assert counts == [
        UnitCounts("a", "g", {**zero, "reprocessed": 3, "dead_lettered": 1, "failed": 1}, 5),
        UnitCounts("a", "h", {**zero, "skipped": 1}, 1),
        UnitCounts("b", "g", {**zero, "deleted": 1}, 1),
    ]


def test_tallies_carry_the_units_whose_dead_letter_stream_was_refused():
    """A refused target (TARGET_REFUSED reasons) is the unit's error, carried to the summary;
    other skipped rows and other reasons are not."""
    refused = TARGET_REFUSED + "'wt:g' is a hash, not a stream; ..."
    first, second = Tally(), Tally()
    first.count(pa.RecordBatch.from_pylist([
        {"stream": "wt", "group": "g", "action": "skipped", "reason": refused},
        {"stream": "wt", "group": "g", "action": "reprocessed", "reason": None},
        {"stream": "a", "group": "g", "action": "skipped", "reason": "no longer pending"}]))
    second.count(pa.RecordBatch.from_pylist([
        {"stream": "wt", "group": "g", "action": "skipped", "reason": refused},
        {"stream": "b", "group": "h", "action": "failed", "reason": TARGET_REFUSED}]))
    tallies = read_tallies([first.to_json(), second.to_json()])
    assert refused_units(tallies) == {("wt", "g"): refused}
    assert refused_units(read_tallies([Tally().to_json()])) == {}


def test_tallies_count_the_skipped_rows_whose_dead_letter_move_is_uncertain():
    """Rows skipped with an uncertain move (a resent dead-letter call) are counted over the
    tasks, from the rows the report holds: no second read of the report; the same reason on
    another action, or another skipped reason, is not."""
    first, second = Tally(), Tally()
    first.count(pa.RecordBatch.from_pylist([
        {"stream": "a", "group": "g", "action": "skipped", "reason": REASON_UNCERTAIN},
        {"stream": "a", "group": "g", "action": "skipped", "reason": "no longer pending"},
        {"stream": "a", "group": "g", "action": "failed", "reason": REASON_UNCERTAIN}]))
    second.count(pa.RecordBatch.from_pylist([
        {"stream": "a", "group": "g", "action": "skipped", "reason": REASON_UNCERTAIN},
        {"stream": "b", "group": "h", "action": "skipped", "reason": REASON_UNCERTAIN},
        {"stream": "b", "group": "h", "action": "reprocessed", "reason": None}]))
    assert uncertain_moves(read_tallies([first.to_json(), second.to_json()])) == 3
    assert uncertain_moves(read_tallies([Tally().to_json()])) == 0


def test_a_step_counts_only_the_rows_its_claim_examined():
    """XAUTOCLAIM may run out of attempts before the end of its XPENDING read: the rows past
    its end belong to the next step, which reads them again."""
    rows = {i: [i, b"dead", 7_200_000, 2] for i in (b"1-0", b"2-0", b"3-0")}
    batch = ClaimBatch("3-0", [b"1-0"], [[b"f", b"v"]], [b"2-0"], rows, None)
    assert examined(batch) == [rows[b"1-0"], rows[b"2-0"]]


def unit_batch() -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist(
        [{"stream": STREAM, "group": GROUP, "consumer": JOB, "part": 0}], schema=arrow(UNIT))


@pytest.mark.parametrize("schedule", [(), ("claim.backoff_factor=1000",)],
                         ids=["xautoclaim", "backoff"])
def test_one_pass_counts_the_pel_as_the_health_pass_finds_it(client: Redis, make_settings,
                                                             schedule):
    """Every kind of entry (fresh ones on a live consumer, deleted, poison, failing), then
    idle entries after more fresh ones than one claim step may examine (claim.count=1:
    XAUTOCLAIM gives up after 10 entries). The one pass's histogram equals the health
    pass's on the same PEL, and its counts are what Redis shows afterwards. Under a steep
    schedule the entries delivered 4 times (below the limit) are not due: left with their
    owner, counted not due, and still in the histogram (the last PEL read counts them)."""
    seeded = seed(client, [STREAM], [GROUP])
    late = add_entries(client, STREAM, 12, lambda i: binary_fields(i, "ok"))
    fresh = deliver(client, STREAM, GROUP, "live-2", 11)
    stuck = deliver(client, STREAM, GROUP, DEAD, 1)
    make_stuck(client, STREAM, GROUP, DEAD, stuck, HOUR_MS)
    assert fresh + stuck == late
    settings = make_settings(f"streams.keys={STREAM}", "claim.count=1",
                             "claim.max_deliveries=5",
                             "handler.path=tests.support.handlers:verify_or_fail", *schedule)
    params = executor_params(settings, "t1")
    (found,) = pa.Table.from_batches(histogram_partition(params)(iter([unit_batch()]))
                                     ).to_pylist()
    out = pa.Table.from_batches(tallied(recover_partition(params, histograms=True))(
        iter([unit_batch()]))).to_pylist()
    tallies = read_tallies(r[TALLY] for r in out if r[TALLY] is not None)
    assert len(tallies) == 1
    (counted,) = histogram_rows(tallies)
    for histogram in ("deliveries", "idle_ages"):
        assert dict(counted[histogram]) == dict(found[histogram]), histogram
    assert 0 <= counted["oldest_idle_ms"] - found["oldest_idle_ms"] < 5_000
    reported = Counter(r["action"] for r in out if r[TALLY] is None)
    waiting = [k for k, kind in seeded.kind.items() if kind == "fail_at_limit" and schedule]
    due = [a for k, a in seeded.action.items() if k not in waiting]
    assert reported == Counter(due) + Counter({"reprocessed": 1})
    (unit,) = unit_counts(tallies, ACTIONS)
    assert {a: unit[a] for a in ACTIONS if unit[a]} == dict(reported)
    assert not_due_counts(tallies).get((STREAM, GROUP), NotDue()).entries == len(waiting)
    owners = Counter(r["consumer"].decode() for r in client.xpending_range(
        STREAM, GROUP, "-", "+", 1000))
    assert owners == {JOB: unit["failed"], LIVE: 10, "live-2": 11,
                      **({DEAD: len(waiting)} if waiting else {})}
    assert client.xlen(dead_letter_key(STREAM, settings.dead_letter.suffix)) == unit[
        "dead_lettered"]
