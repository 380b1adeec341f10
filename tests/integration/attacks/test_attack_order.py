"""Attacks on per-key ordered recovery (issue 63): each test failed on the code it was
written against (see the commit that adds it)."""

from __future__ import annotations

from pathlib import Path

import pytest

from recovery.redis_io.dlq_names import dead_letter_key
from tests.support.attack_order_handlers import XDEL
from tests.support.fault_tools import run_in_process, write_control
from tests.support.order_handler import DONE, FAIL, REJECT, SEEN
from tests.support.order_tools import (
    STREAM,
    age,
    args,
    pending_owners,
    recorded,
    rows_of,
    seed,
)


@pytest.mark.slow
def test_a_head_whose_dead_letter_stream_is_refused_holds_its_key(spark, redis_server,
                                                                  tmp_path: Path) -> None:
    """k0's head is rejected by the handler (Result.dead_letter), but its dead-letter stream
    is refused (a stream that is not one: its oldest entry has no x-death block): the head
    stays pending, skipped. Its key must stay held: k0's later entries must not be handed
    to the handler ahead of it."""
    client = redis_server.client()
    write_control(redis_server.url)
    ids = seed(client, keys=2, per_key=3)
    dlq = dead_letter_key(STREAM, ":dlq")
    client.xadd(dlq, {"not": "a letter"})
    head = ids["k0"][0]
    client.sadd(REJECT, head)
    result = run_in_process(spark, args(redis_server.url, tmp_path / "r", "spark.partitions=1"))
    assert result.code == 0, result.stderr[-3000:]
    assert client.xlen(dlq) == 1  # nothing written to a stream the job does not own
    assert head in pending_owners(client)  # the head was not moved: still pending
    seen = recorded(client, SEEN, ["k0"])["k0"]
    assert seen == [head], f"k0's later entries handed over while its head is pending: {seen}"
    rows = rows_of(spark, tmp_path / "r", result.summary)
    assert [rows[i]["action"] for i in ids["k0"][1:]] == ["held", "held"]


@pytest.mark.slow
def test_an_older_entry_on_a_run_whose_id_extends_this_one_still_holds_its_key(
        spark, redis_server, tmp_path: Path) -> None:
    """A killed run with ``--run-id nightly-2`` left k0's head pending on its consumer
    ``recovery-nightly-2-0`` (not idle yet). A run with ``--run-id nightly`` must see that
    consumer as another run's (its own are ``recovery-nightly-<part>``) and hold k0's later
    entries; a prefix test takes it for its own and hands them over ahead of the head."""
    client = redis_server.client()
    write_control(redis_server.url)
    ids = seed(client, keys=2, per_key=3)
    head = ids["k0"][0]
    client.xclaim(STREAM, "g", "recovery-nightly-2-0", 0, [head], idle=0, justid=True)
    result = run_in_process(spark, [*args(redis_server.url, tmp_path / "r",
                                          "spark.partitions=1"), "--run-id", "nightly"])
    assert result.code == 0, result.stderr[-3000:]
    assert pending_owners(client)[head] == "recovery-nightly-2-0"
    seen = recorded(client, SEEN, ["k0"])["k0"]
    assert seen == [], f"k0 handed over while its head is pending on another run: {seen}"
    rows = rows_of(spark, tmp_path / "r", result.summary)
    assert [rows[i]["action"] for i in ids["k0"][1:]] == ["held", "held"]


@pytest.mark.slow
def test_an_older_entry_pending_on_a_consumer_named_in_non_utf8_bytes_holds_its_key(
        spark, redis_server, tmp_path: Path) -> None:
    """A live consumer whose name is not UTF-8 (any application may name one so; the rest of
    the job shows such names escaped) owns k0's head, not idle. The ordered run must not
    crash on its name, and must hold k0's later entries behind that head; k1 goes on."""
    client = redis_server.client()
    write_control(redis_server.url)
    ids = seed(client, keys=2, per_key=3)
    head = ids["k0"][0]
    client.xclaim(STREAM, "g", b"live-\xff\xfe", 0, [head], idle=0, justid=True)
    result = run_in_process(spark, args(redis_server.url, tmp_path / "r",
                                        "spark.partitions=1"))
    assert result.code == 0, result.stderr[-3000:]
    assert recorded(client, SEEN, ["k0"])["k0"] == []
    assert recorded(client, DONE, ["k1"])["k1"] == ids["k1"]
    rows = rows_of(spark, tmp_path / "r", result.summary)
    assert [rows[i]["action"] for i in ids["k0"][1:]] == ["held", "held"]


@pytest.mark.slow
def test_a_held_entry_deleted_upstream_mid_run_is_not_reported_pending(
        spark, redis_server, tmp_path: Path) -> None:
    """k0's head fails; its last entry is deleted upstream (XDEL) during the run, while the
    run holds it. Giving held entries their counts back (an XCLAIM, which on Redis 7.0 drops
    a deleted entry from the PEL) must not leave a report row saying it ``stays pending``:
    every entry ends exactly once as what it is (here: deleted)."""
    client = redis_server.client()
    write_control(redis_server.url)
    ids = seed(client, keys=2, per_key=3)
    client.sadd(FAIL, ids["k0"][0])
    doomed = ids["k0"][2]
    client.sadd(XDEL, doomed)
    result = run_in_process(spark, args(
        redis_server.url, tmp_path / "r", "spark.partitions=1",
        "handler.path=tests.support.attack_order_handlers:deleting"))
    assert result.code == 0, result.stderr[-3000:]
    pel = pending_owners(client)
    rows = rows_of(spark, tmp_path / "r", result.summary)
    assert rows[ids["k0"][1]]["action"] == "held" and ids["k0"][1] in pel
    row = rows[doomed]
    assert doomed in pel or row["action"] == "deleted", \
        f"reported {row['action']!r} ({row['reason']}) but gone from the PEL"


@pytest.mark.slow
def test_entries_without_a_key_are_never_held_by_the_scan_bound(spark, redis_server,
                                                               tmp_path: Path) -> None:
    """order.missing_key = own: an entry without the key field is its own key, "never held by
    others" (CONFIGURATION.md). A live consumer owns more than order.scan_max entries, so
    claimed entries of the group after the bound may be of a key it holds; but an entry
    without a key cannot be: it must be handed over, not held."""
    client = redis_server.client()
    write_control(redis_server.url)
    ids = seed(client, keys=1, per_key=3, keyless=2)
    client.xclaim(STREAM, "g", "alive", 0, ids["k0"][:2], idle=0, justid=True)
    result = run_in_process(spark, args(redis_server.url, tmp_path / "r", "spark.partitions=1",
                                        "order.scan_max=1"))
    assert result.code == 0, result.stderr[-3000:]
    rows = rows_of(spark, tmp_path / "r", result.summary)
    assert rows[ids["k0"][2]]["action"] == "held"
    assert [rows[i]["action"] for i in ids["-"]] == ["reprocessed", "reprocessed"], \
        [rows[i]["reason"] for i in ids["-"]]


@pytest.mark.slow
def test_a_dry_run_counts_the_entries_without_a_key_that_the_run_dead_letters(
        spark, redis_server, tmp_path: Path) -> None:
    """order.missing_key = dead_letter: the real run dead-letters an entry without the key
    field (``order-key-missing``). The dry run must say so (would_dead_letter), not predict
    a hand-over, and touch nothing; the real run then does what it said."""
    client = redis_server.client()
    write_control(redis_server.url)
    seed(client, keys=1, per_key=2, keyless=1)
    sets = args(redis_server.url, tmp_path / "r", "order.missing_key=dead_letter")
    dry = run_in_process(spark, [*sets, "--dry-run"])
    assert dry.code == 0, dry.stderr[-3000:]
    real = run_in_process(spark, sets)
    assert real.code == 0, real.stderr[-3000:]
    assert real.summary["totals"]["dead_lettered"] == 1
    assert (dry.summary["totals"]["would_dead_letter"],
            dry.summary["totals"]["would_reprocess"]) == (1, 2), dry.summary["totals"]


@pytest.mark.slow
def test_dead_letter_releases_false_keeps_the_key_held_in_the_next_run(spark, redis_server,
                                                                       tmp_path: Path) -> None:
    """With order.dead_letter_releases = false, k0's head rejected (dead-lettered) holds the
    rest of k0 in the run; the next run, with the same setting, must not hand k0's later
    entries over either: the key waits for the operator (its head is in the dead-letter
    stream, not handled)."""
    client = redis_server.client()
    write_control(redis_server.url)
    ids = seed(client, keys=2, per_key=3)
    head = ids["k0"][0]
    client.sadd(REJECT, head)
    hold = ("spark.partitions=1", "order.dead_letter_releases=false")
    first = run_in_process(spark, args(redis_server.url, tmp_path / "r", *hold))
    assert first.code == 0, first.stderr[-3000:]
    assert recorded(client, DONE, ["k0"])["k0"] == []
    age(client, list(pending_owners(client)))
    second = run_in_process(spark, args(redis_server.url, tmp_path / "r", *hold))
    assert second.code == 0, second.stderr[-3000:]
    done = recorded(client, DONE, ["k0"])["k0"]
    assert done == [], f"k0 released in the next run although its head was dead-lettered: {done}"


@pytest.mark.slow
def test_a_retried_hand_over_keeps_a_key_held_behind_a_head_dead_lettered_before(
        spark, redis_server, tmp_path: Path, faults) -> None:
    """order.dead_letter_releases = false; k0's head rejected (Result.dead_letter) in the
    first wave; the hand-over task fails after that wave (the suite's session retries
    tasks). The retried attempt finds the head gone from the PEL (the failed attempt moved
    it) and must still hold k0: none of k0's later entries may reach the handler."""
    client = redis_server.client()
    write_control(redis_server.url)
    ids = seed(client, keys=2, per_key=3)
    head = ids["k0"][0]
    client.sadd(REJECT, head)
    faults("ordered 1 0")
    result = run_in_process(spark, args(redis_server.url, tmp_path / "r", "spark.partitions=1",
                                        "order.dead_letter_releases=false"))
    assert result.code == 0, result.stderr[-3000:]
    dead = [f[b"x-original-id"].decode()
            for _, f in client.xrange(dead_letter_key(STREAM, ":dlq"))]
    assert dead == [head]
    done = recorded(client, DONE, ["k0"])["k0"]
    assert done == [], f"k0 released by the retry although its head was dead-lettered: {done}"
    assert set(ids["k0"][1:]) <= set(pending_owners(client))
