"""Odd values in fields the job reads but did not write (issue 48): a count that is no sane
count never stops other entries, never fails the run and never inflates a delivery count.

- ``x-recovery-deliveries`` (a requeued copy's carried deliveries): any producer can write it;
  a value that is not a sane count is ignored (the entry routes on its PEL count alone) and
  the row's reason says so;
- PEL counts at the server's maximum (XNACK FATAL's poison mark; XCLAIM RETRYCOUNT sets the
  same here) or wrapped past it by a claim: read as the maximum, dead-lettered, never raise;
- the dead-letter reader's x- numbers: null where a value is not a sane number;
- the redrive's ``x-redrive-count``: a value that is not a sane count starts again at 1.

Checked in Redis itself (PEL, dead-letter stream, what the recording handler was handed).
"""

from __future__ import annotations

import pytest
from redis import Redis

from recovery.counts import INT64_MAX, MAX_CARRIED, count_of
from recovery.dead_letters.read import dead_letter_row, page_batch
from recovery.executor.claim.backoff import due_in_ms
from recovery.executor.claimed import Claimed, carried_deliveries
from recovery.executor.handover.dead_letter import over_limit_reason
from recovery.executor.handover.routed import RoutedBatch
from recovery.executor.histogram import PelHistogram
from recovery.params import Unit
from recovery.redis_io.dlq_names import dead_letter_key
from recovery.settings.model import executor_params, load_settings
from recovery.testing.backlog import add_entries, create_group, deliver, make_stuck
from tests.support.backlogs import DEAD, HOUR_MS, binary_fields
from tests.support.fault_tools import (
    BACKOFF,
    GROUP,
    handed_over,
    job_args,
    report_rows,
    rows_by_key,
    run_in_process,
    write_control,
)
from tests.support.handlers import CHECKSUM, checksum
from tests.support.invariants import Pending, dead_letters, pel
from tests.support.redrive_tools import dead_letter, redrive

CARRIED = b"x-recovery-deliveries"
# Values that broke the job, or would have been read as counts although they are none.
ODD = {
    "5000 digits": b"7" * 5000,
    "20 digits": b"9" * 20,
    "above the bound": str(MAX_CARRIED + 1).encode(),
    "negative": b"-3",
    "arabic-indic three": "\u0663".encode(),  # str.isdigit() is True, int() accepts it
    "superscript two": "\u00b2".encode(),  # str.isdigit() is True, int() refuses it
    "empty": b"",
    "not UTF-8": b"\xff\xfe7",
    "spaces": b" 7 ",
    "underscore": b"1_0",
    "plus sign": b"+3",
    "hex": b"0x10",
    "exponent": b"1e3",
    "fraction": b"2.0",
}
SANE = {b"0": 0, b"7": 7, b"007": 7, str(MAX_CARRIED).encode(): MAX_CARRIED}


# --- The parse itself -------------------------------------------------------------------


@pytest.mark.parametrize("value", ODD.values(), ids=ODD.keys())
def test_a_value_that_is_no_sane_count_parses_to_none(value):
    assert count_of(value, MAX_CARRIED) is None
    assert count_of(value.decode("utf-8", "replace"), MAX_CARRIED) is None
    assert carried_deliveries([(CARRIED, value)]) == 0


@pytest.mark.parametrize(("value", "expected"), SANE.items())
def test_ascii_digits_within_the_bound_are_a_count(value, expected):
    assert count_of(value, MAX_CARRIED) == expected
    assert count_of(value.decode(), MAX_CARRIED) == expected
    assert carried_deliveries([(b"a", b"1"), (CARRIED, value)]) == expected


def test_a_report_with_odd_counts_builds_and_says_why():
    fields = [[(b"a", b"1"), (CARRIED, b"9" * 20)], [(CARRIED, b"2")], [(b"n", b"1")]]
    claimed = Claimed.of_unit(Unit("s", "g", "c"), ["1-0", "2-0", "3-0"], [False] * 3,
                              [None] * 3, [None] * 3, fields,  # type: ignore[arg-type]
                              [2, INT64_MAX, 1])
    claimed.add_carried(range(3))
    assert claimed.odd_carried == [True, False, False]
    assert Claimed.from_arrow(claimed.to_arrow()).odd_carried == [True, False, False]
    assert Claimed.from_arrow(claimed.to_arrow().slice(1)).odd_carried == []
    plain = Claimed.of_unit(Unit("s", "g", "c"), ["4-0"], [False], [None], [None],
                            [[(b"n", b"1")]], [1])
    assert Claimed.joined([plain, claimed]).odd_carried == [False, True, False, False]
    assert Claimed.joined([plain, plain]).odd_carried == []
    rb = RoutedBatch(claimed, 5)
    assert rb.route == ["handle", "dead_letter", "handle"]
    rb.set_rows([0, 2], "reprocessed")
    rb.set(1, "dead_lettered", "max-deliveries-exceeded")
    rows = rb.report().to_pylist()
    assert [r["delivery_count"] for r in rows] == [2, INT64_MAX, 1]
    assert "x-recovery-deliveries" in rows[0]["reason"] and "ignored" in rows[0]["reason"]
    assert rows[1]["reason"] == "max-deliveries-exceeded"
    assert rows[2]["reason"] is None


def test_an_entry_taken_back_gets_its_carried_count_from_its_fetched_fields():
    """An earlier attempt's entries come without fields (the hand-over fetches them)."""
    claimed = Claimed.of_unit(Unit("s", "g", "c"), ["1-0", "2-0", "3-0"], [False] * 3,
                              [None] * 3, [None] * 3, [None] * 3, [3, 3, INT64_MAX])
    rb = RoutedBatch(claimed, 5)
    rb.fetched = {0: [(CARRIED, b"\xd9\xa3")], 1: [(CARRIED, b"4")],
                  2: [(CARRIED, b"4")]}
    for i in range(3):
        rb.add_carried(i)
    assert rb.delivery_count == [3, 7, INT64_MAX]
    assert rb.odd_carried == {0}
    rb.set_rows([0, 1, 2], "reprocessed")
    assert [r["reason"] is not None for r in rb.report().to_pylist()] == [True, False, False]


NO_NUMBER = {**{k: v for k, v in ODD.items() if k != "above the bound"},
             "int64 + 1": str(INT64_MAX + 1).encode()}


@pytest.mark.parametrize("value", NO_NUMBER.values(), ids=NO_NUMBER.keys())
def test_dead_letter_numbers_that_are_none_read_as_null(value):
    flat = [b"n", b"1", b"x-redrive-count", value, b"x-original-stream", b"s",
            b"x-delivery-count", value, b"x-delivery-limit", value, b"x-death-time", value,
            b"x-idle-ms", value]
    row = dead_letter_row("{s}:dlq", b"1-0", flat)
    assert [row[c] for c in ("delivery_count", "delivery_limit", "death_time_ms", "idle_ms",
                             "redrive_count")] == [None] * 5
    assert row["fields"] == [("n", b"1")]
    assert page_batch("{s}:dlq", [[b"1-0", flat]]).num_rows == 1  # Arrow takes it


# --- Through the real job -------------------------------------------------------------


def seed_two_streams(client: Redis, odd: bytes, count: int = 1) -> tuple[str, str]:
    """``d2:a-poison`` (one entry carrying `odd` as its carried deliveries) and ``d2:b-ok``
    (one innocent entry), one group each, stuck an hour on a dead consumer, delivered
    `count` times. Their IDs."""
    ids = []
    for stream, extra in (("d2:a-poison", {CARRIED: odd}), ("d2:b-ok", {})):
        fields = {**binary_fields(0, "ok"), **extra}
        fields[CHECKSUM] = checksum([(k, v) for k, v in fields.items() if k != CHECKSUM])
        create_group(client, stream, GROUP)
        [entry_id] = add_entries(client, stream, 1, lambda _i, f=fields: f)  # type: ignore[misc]
        assert deliver(client, stream, GROUP, DEAD, 1) == [entry_id]
        make_stuck(client, stream, GROUP, DEAD, [entry_id], HOUR_MS, count)
        ids.append(entry_id)
    return ids[0], ids[1]


STREAMS = ["d2:a-poison", "d2:b-ok"]
RUN_ODD = {k: ODD[k] for k in ("5000 digits", "20 digits", "arabic-indic three",
                               "superscript two", "not UTF-8", "negative")}


@pytest.mark.slow
@pytest.mark.parametrize("value", RUN_ODD.values(), ids=RUN_ODD.keys())
def test_an_odd_carried_count_costs_nobody_anything(spark, redis_server, tmp_path, value):
    """Each odd value in a run of the job (in this process: the journaled one pass; the
    issue's own run is the "5000 digits" case). A run under spark-submit, ``local[2]``
    without the journal, claims and hands over through the same one-pass code: that path
    under a real spark-submit is tests/integration/test_backoff.py's
    ``test_a_scheduled_run_through_spark_submit``."""
    client = redis_server.client()
    poison, innocent = seed_two_streams(client, value)
    write_control(redis_server.url)
    run_id = "odd-" + str(abs(hash(value)))
    result = run_in_process(spark, job_args(redis_server.url, tmp_path, STREAMS,
                                            "claim.min_idle_ms=1", run_id=run_id))

    assert result.code == 0, result.stderr[-3000:]
    assert result.summary["status"] == "ok"
    # Both handled once and acked: the odd field is ignored, the entry is no poison.
    assert handed_over(client) == {("d2:a-poison", GROUP, poison): 1,
                                   ("d2:b-ok", GROUP, innocent): 1}
    assert pel(client, "d2:a-poison", GROUP) == {} and pel(client, "d2:b-ok", GROUP) == {}
    assert not client.exists(*(dead_letter_key(s, ":dlq") for s in STREAMS))
    rows = rows_by_key(report_rows(spark, tmp_path, run_id) or [])
    [odd_row] = rows[("d2:a-poison", GROUP, poison)]
    [ok_row] = rows[("d2:b-ok", GROUP, innocent)]
    assert (odd_row["action"], odd_row["delivery_count"]) == ("reprocessed", 2)
    assert "x-recovery-deliveries" in odd_row["reason"] and "ignored" in odd_row["reason"]
    assert (ok_row["action"], ok_row["delivery_count"], ok_row["reason"]) == \
        ("reprocessed", 2, None)


@pytest.mark.slow
def test_a_dry_run_plans_an_odd_carried_count_as_ignored(spark, redis_server, tmp_path):
    client = redis_server.client()
    poison, innocent = seed_two_streams(client, ODD["20 digits"])
    before = {s: pel(client, s, GROUP) for s in STREAMS}
    result = run_in_process(spark, [*job_args(redis_server.url, tmp_path, STREAMS,
                                              run_id="odd-dry"), "--dry-run"])

    assert result.code == 0, result.stderr[-3000:]
    assert {s: pel(client, s, GROUP) for s in STREAMS} == before
    rows = rows_by_key(report_rows(spark, tmp_path, "odd-dry") or [])
    [odd_row] = rows[("d2:a-poison", GROUP, poison)]
    assert (odd_row["action"], odd_row["delivery_count"]) == ("would_reprocess", 2)
    assert "x-recovery-deliveries" in odd_row["reason"]
    assert rows[("d2:b-ok", GROUP, innocent)][0]["reason"] is None


@pytest.mark.slow
def test_a_requeued_copy_carries_a_sane_count_in_place_of_an_odd_one(spark, redis_server,
                                                                      tmp_path):
    client = redis_server.client()
    poison, innocent = seed_two_streams(client, ODD["20 digits"], count=2)
    last = {s: client.xinfo_stream(s)["last-generated-id"] for s in STREAMS}
    result = run_in_process(spark, job_args(redis_server.url, tmp_path, STREAMS,
                                            "reprocess.mode=requeue", run_id="odd-rq"))

    assert result.code == 0, result.stderr[-3000:]
    for stream in STREAMS:
        assert pel(client, stream, GROUP) == {}
        [(_, copy)] = client.xrange(stream, b"(" + last[stream])
        assert copy[CARRIED] == b"2", "its deliveries to the application, the odd value gone"
    assert not client.exists(*(dead_letter_key(s, ":dlq") for s in STREAMS))
    rows = rows_by_key(report_rows(spark, tmp_path, "odd-rq") or [])
    assert rows[("d2:a-poison", GROUP, poison)][0]["action"] == "requeued"
    assert rows[("d2:b-ok", GROUP, innocent)][0]["action"] == "requeued"


@pytest.mark.slow
@pytest.mark.parametrize("schedule", [(), BACKOFF], ids=["xautoclaim", "backoff"])
def test_a_pel_count_at_the_maximum_is_dead_lettered_and_nothing_raises(
        spark, redis_server, tmp_path, schedule):
    """XNACK FATAL (Redis 8.8) sets the count to the maximum; XCLAIM RETRYCOUNT does the
    same here. The claim's +1 wraps it in Redis; the job reads the maximum."""
    client = redis_server.client()
    poison, innocent = seed_two_streams(client, b"3")
    make_stuck(client, "d2:a-poison", GROUP, DEAD, [poison], HOUR_MS, INT64_MAX)
    write_control(redis_server.url)
    run_id = "fatal-" + str(len(schedule))
    result = run_in_process(spark, job_args(redis_server.url, tmp_path, STREAMS, *schedule,
                                            run_id=run_id))

    assert result.code == 0, result.stderr[-3000:]
    assert handed_over(client) == {("d2:b-ok", GROUP, innocent): 1}
    assert pel(client, "d2:a-poison", GROUP) == {} and pel(client, "d2:b-ok", GROUP) == {}
    [letter] = dead_letters(client, "d2:a-poison")
    assert letter[b"x-original-id"] == poison.encode()
    assert letter[b"x-delivery-count"] == str(INT64_MAX).encode()
    assert letter[b"x-death-reason"] == b"delivery-count-at-maximum"  # a reason of its own
    rows = rows_by_key(report_rows(spark, tmp_path, run_id) or [])
    [row] = rows[("d2:a-poison", GROUP, poison)]
    assert (row["action"], row["delivery_count"]) == ("dead_lettered", INT64_MAX)
    assert row["reason"] == "delivery-count-at-maximum"
    assert rows[("d2:b-ok", GROUP, innocent)][0]["action"] == "reprocessed"


# --- The redrive and the dead-letter reader -----------------------------------------------


def test_redrive_restarts_an_odd_redrive_count_at_one(redis_server):
    client = redis_server.client()
    create_group(client, "rd", GROUP)
    payloads = [{b"n": str(i).encode(), b"x-redrive-count": v}
                for i, v in enumerate([*ODD.values(), b"4"])]
    dead_letter(client, "rd", GROUP, payloads, ["max-deliveries-exceeded"] * len(payloads))
    last = client.xinfo_stream("rd")["last-generated-id"]

    summary = redrive(redis_server, "streams.keys=rd")

    assert summary.totals["redriven"] == len(payloads)
    assert client.xlen(dead_letter_key("rd", ":dlq")) == 0
    counts = {f[b"n"]: f[b"x-redrive-count"] for _, f in client.xrange("rd", b"(" + last)}
    assert counts == {**{str(i).encode(): b"1" for i in range(len(ODD))},
                      str(len(ODD)).encode(): b"5"}


@pytest.mark.slow
def test_the_dead_letter_reader_reads_odd_numbers_as_null(spark, redis_server, tmp_path):
    from recovery.dead_letters.run import read_dead_letters
    from recovery.settings.model import load_settings

    client = redis_server.client()
    key = dead_letter_key("dl", ":dlq")
    for name, value in NO_NUMBER.items():
        client.xadd(key, {b"name": name.encode(), b"x-redrive-count": value,
                          b"x-original-stream": b"dl", b"x-delivery-count": value,
                          b"x-delivery-limit": value, b"x-death-time": value,
                          b"x-idle-ms": value})
    client.xadd(key, {b"name": b"sane", b"x-original-stream": b"dl",
                      b"x-delivery-count": b"6", b"x-idle-ms": b"1000"})
    client.xadd(key, {b"name": b"far", b"x-original-stream": b"dl",  # past any timestamp
                      b"x-death-time": str(INT64_MAX).encode(),
                      b"x-delivery-count": str(INT64_MAX).encode()})
    settings = load_settings(None, [f"redis.url={redis_server.url}",
                                    f"report.path={tmp_path / 'r'}", "streams.keys=dl"])

    rows = read_dead_letters(spark, settings).collect()

    numbers = {r.fields["name"].decode(): (r.delivery_count, r.delivery_limit,
                                           r.death_time_ms, r.idle_ms, r.redrive_count)
               for r in rows}
    assert numbers == {**{name: (None,) * 5 for name in NO_NUMBER},
                       "sane": (6, None, None, 1000, None),
                       "far": (INT64_MAX, None, None, None, None)}
    assert {r.fields["name"].decode(): r.death_time for r in rows}["far"] is None


def test_redis_8_8_pel_shapes_route_as_they_should():
    """Rows as Redis 8.8 shows them after XNACK: owner "", idle -1 (given up: due now under
    any backoff schedule), and after XNACK ... FATAL the count at the int64 maximum (a
    dead-letter reason of its own; a merely high count keeps the usual one)."""
    params = executor_params(load_settings(None, ["streams.keys=s", "claim.backoff_factor=10"]),
                             "r")
    assert due_in_ms(params, 3, -1) == 0
    assert due_in_ms(params, 3, 0) > 0  # the same entry merely fresh is not due
    assert over_limit_reason(INT64_MAX) == "delivery-count-at-maximum"
    assert over_limit_reason(6) == over_limit_reason(INT64_MAX - 1) == "max-deliveries-exceeded"
    histogram = PelHistogram()
    histogram.add([[b"1-0", b"", -1, INT64_MAX], [b"2-0", b"", -1, 1]])
    assert histogram.row("s", "g")["oldest_idle_ms"] == -1


@pytest.mark.slow
def test_a_wrapped_count_left_to_a_live_consumer_stays_as_it_is(spark, redis_server,
                                                                 tmp_path):
    """A claim past the maximum wraps the count negative (XNACK FATAL, then any claim): the
    entry of a live consumer is not due; the run's PEL histograms count it, nothing
    raises, and it keeps its owner and its count."""
    client = redis_server.client()
    poison, innocent = seed_two_streams(client, b"1")
    make_stuck(client, "d2:a-poison", GROUP, "live", [poison], 0, INT64_MAX)
    client.xclaim("d2:a-poison", GROUP, "live", 0, [poison])  # +1: wraps in Redis
    assert pel(client, "d2:a-poison", GROUP)[poison].delivery_count == -(2**63)
    write_control(redis_server.url)
    result = run_in_process(spark, job_args(redis_server.url, tmp_path, STREAMS,
                                            "claim.min_idle_ms=600000", run_id="wrapped"))

    assert result.code == 0, result.stderr[-3000:]
    assert handed_over(client) == {("d2:b-ok", GROUP, innocent): 1}
    assert pel(client, "d2:a-poison", GROUP)[poison] == Pending("live", -(2**63))
    assert pel(client, "d2:b-ok", GROUP) == {}
