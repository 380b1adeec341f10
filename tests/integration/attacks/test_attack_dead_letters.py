"""Adversarial trials of the dead-letter target rules (issue 60, parts 1 and 3): each case
is a way a user's command still writes into, or silently leaves out, what is not the job's.

Every case runs the job's command line in this process against a real Redis and reads
Redis back (the application stream byte for byte, the PELs) beside the summary. Each test
failed on the code it was written against; see the commit that adds it."""

from __future__ import annotations

import pytest
from redis import Redis

from recovery.testing.backlog import create_group, deliver
from tests.support.fault_tools import run_in_process
from tests.support.invariants import pel
from tests.support.redrive_tools import redrive
from tests.support.target_tools import OVER, args, skipped_rows, snapshot, stuck

NOT_OK = ("partial", "failed", "error")


def letter(source: str) -> dict[bytes, bytes]:
    """A dead letter of an earlier run (its x-death block)."""
    return {b"n": b"0", b"x-original-stream": source.encode(), b"x-original-id": b"1-1",
            b"x-death-reason": b"max-deliveries-exceeded"}


def _told(summary: dict, key: str) -> bool:
    """Whether the summary's `skipped` rows name `key` and its status is not a quiet one."""
    return summary["status"] in NOT_OK and any(
        key in s["stream"] or key in s["reason"] for s in summary["skipped"])


def _units(summary: dict) -> set[tuple[str, str]]:
    return {(u["stream"], u["group"]) for u in summary["units"]}


# --- a selected stream left out by its name alone ---------------------------------------------

@pytest.mark.slow
def test_an_application_stream_named_like_the_suffix_in_streams_keys_is_never_dropped_silently(
        spark, redis_server, tmp_path):
    """``orders:dlq`` is no dead-letter name the slot rule can make (``orders`` ->
    ``{orders}:dlq``): named in ``streams.keys``, an application stream with 20 stuck
    entries is recovered, or the run says it is not; before: ``status ok``, ``skipped []``,
    its 20 entries stuck, one INFO line."""
    client = redis_server.client()
    stuck(client, "orders", "g")
    app_ids = stuck(client, "orders:dlq", "app")
    result = run_in_process(spark, args(redis_server, tmp_path, "streams.keys=orders,orders:dlq"))
    assert result.code == 0, result.stderr[-2000:]
    recovered = ("orders:dlq", "app") in _units(result.summary)
    assert recovered or _told(result.summary, "orders:dlq"), result.summary
    if recovered:
        assert pel(client, "orders:dlq", "app") == {}
        assert len(app_ids) == 20


@pytest.mark.slow
def test_an_application_stream_whose_oldest_entry_is_a_letter_is_never_dropped_silently(
        spark, redis_server, tmp_path):
    """``shop:eu``: one letter first (written while it was empty), then the application's
    own entries, 20 of them stuck in its group ``app``. Under ``{stream}:{group}`` the run
    with ``streams.match=shop*`` dropped it as a dead-letter stream by its oldest entry,
    although its newest is no letter (the move script would refuse it as a target): before,
    ``status empty``, no warning, no skipped row, 20 entries stuck."""
    client = redis_server.client()
    client.xadd("shop:eu", letter("shop"))
    stuck(client, "shop:eu", "app")
    result = run_in_process(spark, args(redis_server, tmp_path, "streams.match=shop*",
                                        "dead_letter.stream={stream}:{group}"))
    assert result.code == 0, result.stderr[-2000:]
    recovered = ("shop:eu", "app") in _units(result.summary)
    assert recovered or _told(result.summary, "shop:eu"), result.summary


def test_the_redrive_takes_back_letters_of_a_source_the_template_could_name(redis_server):
    """Under ``{stream}:{group}`` the recovery run recovers ``orders:v2`` and writes its
    letters to ``orders:v2:billing``; a redrive with ``streams.match=orders*`` must move
    them back (or say why not). Before: ``orders:v2`` dropped by its name alone, ``status
    ok``, ``skipped []``, its letters left where they were."""
    client = redis_server.client()
    for source in ("orders", "orders:v2"):
        client.xadd(source, {b"n": b"seed"})
        create_group(client, source, "billing")
        deliver(client, source, "billing", "c", 1)
        for i in range(3):
            client.xadd(f"{source}:billing", {
                b"n": str(i).encode(), b"x-original-stream": source.encode(),
                b"x-original-group": b"billing", b"x-original-id": f"1-{i}".encode(),
                b"x-death-reason": b"max-deliveries-exceeded"})
    summary = redrive(redis_server, "streams.match=orders*",
                      "dead_letter.stream={stream}:{group}")
    moved = {u["stream"]: u["redriven"] for u in summary.units}
    if moved.get("orders:v2") != 3:
        assert summary.status != "ok" and any(
            "orders:v2" in s["stream"] for s in summary.skipped), summary
    else:
        assert client.xlen("orders:v2:billing") == 0 and client.xlen("orders:v2") == 4
    assert moved.get("orders") == 3


# --- a requeue target of another type ------------------------------------------------------

@pytest.mark.slow
def test_a_requeue_target_of_another_type_is_the_units_error(spark, redis_server, tmp_path):
    """``{orders}:retry:g`` is a hash: the 15 entries to requeue stay pending (fine), but
    the run said ``status ok``, ``skipped []`` and "the stream or its consumer group
    vanished" per row, run after run. Expected as for a dead-letter key of another type:
    ``partial``, a skipped row naming the key, never "vanished"."""
    client = redis_server.client()
    ids = stuck(client, "orders", "g")
    client.hset("{orders}:retry:g", "owner", "another team")
    result = run_in_process(spark, args(
        redis_server, tmp_path, "streams.keys=orders", "reprocess.mode=requeue",
        "reprocess.requeue_stream={stream}:retry:{group}"))
    assert result.code == 0, result.stderr[-2000:]
    assert client.hgetall("{orders}:retry:g") == {b"owner": b"another team"}
    assert sorted(pel(client, "orders", "g")) == sorted(ids[OVER:])  # pending, not lost
    assert result.summary["status"] == "partial", result.summary
    reason = skipped_rows(result.summary)[("orders", "g")]
    assert "{orders}:retry:g" in reason and "vanished" not in reason


# --- the newest-entry check: the dry run and a plan ------------------------------------------

def _letters_then_an_order(client: Redis) -> None:
    stuck(client, "shop", "eu")
    client.xadd("shop:eu", letter("shop"))
    client.xadd("shop:eu", {b"order": b"o-1", b"amount": b"100"})


@pytest.mark.slow
def test_the_dry_run_tells_the_newest_entry_refusal_the_real_run_makes(spark, redis_server,
                                                                       tmp_path):
    """``shop:eu``: a letter, then an order. The real run refuses it (its newest entry is no
    letter): ``partial``; the dry run said ``ok``, ``would_dead_letter 5``."""
    client = redis_server.client()
    _letters_then_an_order(client)
    argv = args(redis_server, tmp_path, "streams.keys=shop", "dead_letter.stream={stream}:{group}")
    dry = run_in_process(spark, [*argv, "--dry-run"])
    real = run_in_process(spark, argv)
    assert real.summary["status"] == "partial"
    assert dry.summary["status"] == "partial", dry.summary
    assert skipped_rows(dry.summary) == skipped_rows(real.summary)


@pytest.mark.slow
def test_a_plan_applied_never_writes_letters_into_an_application_stream(spark, redis_server,
                                                                        tmp_path):
    """The same ``shop:eu`` (a letter, then an order): the plain run refuses it, but the
    run that applies a dry run's plan (``--plan``: discovery reads XINFO GROUPS, so the move
    script checks the oldest entry only) appended the 5 letters after the order, ``status
    ok``. The same holds on a Redis Cluster (no FULL read there either)."""
    client = redis_server.client()
    _letters_then_an_order(client)
    argv = args(redis_server, tmp_path, "streams.keys=shop", "dead_letter.stream={stream}:{group}")
    dry = run_in_process(spark, [*argv, "--dry-run"])
    assert dry.code == 0, dry.stderr[-2000:]
    before = snapshot(client, "shop:eu")
    applied = run_in_process(spark, [*argv, "--plan", dry.summary["report_path"]])
    assert applied.code == 0, applied.stderr[-2000:]
    assert snapshot(client, "shop:eu") == before  # no letter after the application's entry
    assert applied.summary["status"] == "partial", applied.summary


@pytest.mark.slow
def test_on_a_redis_cluster_letters_never_go_after_an_application_entry(spark, redis_cluster,
                                                                        tmp_path):
    """On a Redis Cluster discovery reads XINFO GROUPS (no FULL read), so the move script
    checked the oldest entry of ``{shop}:eu`` only and appended the letters after the
    application's order, ``status ok``; the user may run XINFO STREAM, so the newest is
    checked too."""
    redis_cluster.flush()
    client = redis_cluster.client()
    ids = stuck(client, "{shop}", "eu")
    client.xadd("{shop}:eu", letter("{shop}"))
    client.xadd("{shop}:eu", {b"order": b"o-1", b"amount": b"100"})
    before = snapshot(client, "{shop}:eu")
    result = run_in_process(spark, args(redis_cluster, tmp_path, "streams.keys={shop}",
                                        "dead_letter.stream={stream}:{group}"))
    assert result.code == 0, result.stderr[-2000:]
    assert snapshot(client, "{shop}:eu") == before
    assert result.summary["status"] == "partial", result.summary
    assert sorted(pel(client, "{shop}", "eu")) == sorted(ids[:OVER])


@pytest.mark.slow
def test_the_dry_run_tells_the_requeue_target_refusal_the_real_run_makes(spark, redis_server,
                                                                         tmp_path):
    """``{orders}:retry:g`` is a hash: the real run refuses it (``partial``, a skipped row);
    the dry run said ``ok`` with ``would_requeue 15``."""
    client = redis_server.client()
    stuck(client, "orders", "g")
    client.hset("{orders}:retry:g", "owner", "another team")
    argv = args(redis_server, tmp_path, "streams.keys=orders", "reprocess.mode=requeue",
                "reprocess.requeue_stream={stream}:retry:{group}")
    dry = run_in_process(spark, [*argv, "--dry-run"])
    real = run_in_process(spark, argv)
    assert real.summary["status"] == "partial"
    assert dry.summary["status"] == "partial", dry.summary
    assert skipped_rows(dry.summary) == skipped_rows(real.summary)


@pytest.mark.slow
def test_a_literal_template_naming_an_empty_matched_source_writes_no_letters_quietly(
        spark, redis_server, tmp_path):
    """``dead_letter.stream = "pay"`` beside ``streams.match = "pay*"``: ``pay`` is an
    application stream that happens to be empty (its group ``app`` has read everything).
    Named in ``streams.keys`` it is refused at start; matched, it was taken for an empty
    dead-letter stream and got the 5 letters of ``pay:v2`` (group ``app``: lag 5, the next
    read hands them out as payments), ``status ok``, ``skipped []``."""
    client = redis_server.client()
    client.xgroup_create("pay", "app", id="$", mkstream=True)
    stuck(client, "pay:v2", "billing")
    result = run_in_process(spark, args(redis_server, tmp_path, "streams.match=pay*",
                                        "dead_letter.stream=pay"))
    written = client.xlen("pay")
    assert written == 0 or _told(result.summary, "pay"), (written, result.summary)
