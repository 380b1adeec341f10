"""Dead letters go only where the job's own letters live (issue 60, parts 1 and 3): a
dead-letter name that resolves to a selected source, a requeue target, an application
stream or a key of another type is refused (at start, exit 2, where the settings or
discovery can tell; else by the move script, for that unit: its over-limit entries stay
pending, status ``partial``, a ``skipped`` row naming the key and the fix, counted in the
metrics). And a selected stream that a template could name is never dropped silently.

Each case runs the job's command line in this process (``run_in_process``) against a real
server and reads Redis back: the application stream byte for byte, its groups' lag and PEL,
the source's PEL, the report rows."""

from __future__ import annotations

import pytest
from redis import Redis

from recovery.errors import TARGET_REFUSED
from recovery.metrics.families import run_registry
from recovery.metrics.recovery_run import recovery_facts
from recovery.report.summary import RunSummary
from recovery.settings.model import load_settings
from recovery.testing.backlog import create_group, deliver, make_stuck
from tests.support.backlogs import DEAD, HOUR_MS, age_pending
from tests.support.fault_tools import report_rows, run_in_process
from tests.support.invariants import pel
from tests.support.target_tools import OVER, args, skipped_rows, snapshot, stuck


def application_stream(client: Redis, key: str = "shop:eu") -> None:
    """Another team's stream: orders, its group `app`, 2 entries stuck on a crashed worker."""
    for i in range(3):
        client.xadd(key, {b"order": f"o-{i}".encode(), b"amount": str(100 + i).encode()})
    client.xgroup_create(key, "app", id="0")
    client.xreadgroup("app", "crashed-worker", {key: ">"}, count=2)


# --- part 1: the name resolves to what is not the job's ------------------------------------

@pytest.mark.slow
def test_a_template_naming_an_application_stream_writes_nothing_into_it(spark, redis_server,
                                                                        tmp_path, caplog):
    client = redis_server.client()
    ids = stuck(client, "shop", "eu")
    application_stream(client)
    before = snapshot(client, "shop:eu")
    argv = args(redis_server, tmp_path, "streams.match=shop*",
                "dead_letter.stream={stream}:{group}")

    for _ in range(2):  # every run says so, and nothing accumulates
        age_pending(client, "shop", "eu", ids, HOUR_MS)  # what the last run holds: due again
        result = run_in_process(spark, argv)
        assert result.code == 0, result.stderr[-2000:]
        assert snapshot(client, "shop:eu") == before  # no letter, no lag, PELs as they were
        assert result.summary["status"] == "partial"
        skipped = skipped_rows(result.summary)
        unit = skipped[("shop", "eu")]
        assert unit.startswith(TARGET_REFUSED) and "'shop:eu'" in unit \
            and "dead_letter.stream" in unit
        stream = skipped[("shop:eu", None)]  # a selected stream dropped: said so
        assert "not recovered" in stream and "shop / eu" in stream
        # The over-limit entries stay pending on the job's consumer, the rest were handled.
        left = pel(client, "shop", "eu")
        assert sorted(left) == sorted(ids[:OVER])
        assert all(p.consumer.startswith("recovery-") for p in left.values())
        rows = report_rows(spark, tmp_path, result.summary["run_id"]) or []
        refused = [r for r in rows if r["id"] in ids[:OVER]]
        assert sorted(r["id"] for r in refused) == sorted(ids[:OVER])
        assert {r["action"] for r in refused} == {"skipped"}
        assert all(r["reason"].startswith(TARGET_REFUSED) for r in refused)
    warned = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert any("skip shop:eu: not recovered" in m for m in warned)
    assert any(m.startswith("shop / eu: " + TARGET_REFUSED) for m in warned)


def test_a_template_naming_a_selected_source_is_refused_at_start(redis_server, tmp_path):
    client = redis_server.client()
    ids = {s: stuck(client, s, "billing") for s in ("orders", "payments", "shipping")}
    before = {s: snapshot(client, s) for s in ids}
    result = run_in_process(None, args(redis_server, tmp_path,
                                       "streams.keys=orders,payments,shipping",
                                       "dead_letter.stream=payments"))
    assert result.code == 2
    line = result.stderr.strip().splitlines()[-1]
    assert "dead_letter.stream 'payments'" in line and "selected source" in line
    assert {s: snapshot(client, s) for s in ids} == before  # nothing claimed, nothing written


def test_dead_letter_and_requeue_templates_naming_one_stream_are_refused_at_start(
        redis_server, tmp_path):
    client = redis_server.client()
    stuck(client, "shop", "eu")
    before = snapshot(client, "shop")
    result = run_in_process(None, args(
        redis_server, tmp_path, "streams.keys=shop", "reprocess.mode=requeue",
        "reprocess.requeue_stream={stream}:retry:{group}",
        "dead_letter.stream={{{stream}}}:retry:{group}"))
    assert result.code == 2
    line = result.stderr.strip().splitlines()[-1]
    assert "reprocess.requeue_stream" in line and "dead_letter.stream" in line
    assert snapshot(client, "shop") == before and client.keys("{shop}*") == []


@pytest.mark.slow
def test_an_application_stream_named_in_streams_keys_is_refused_at_start(spark, redis_server,
                                                                         tmp_path):
    client = redis_server.client()
    stuck(client, "shop", "eu")
    application_stream(client)
    before = {k: snapshot(client, k) for k in ("shop", "shop:eu")}
    result = run_in_process(spark, args(redis_server, tmp_path, "streams.keys=shop,shop:eu",
                                        "dead_letter.stream={stream}:{group}"))
    assert result.code == 2, result.stderr[-2000:]
    line = result.stderr.strip().splitlines()[-1]
    assert "streams.keys selects 'shop:eu'" in line and "dead_letter.stream" in line
    assert {k: snapshot(client, k) for k in before} == before


@pytest.mark.slow
def test_a_matched_stream_ending_with_the_suffix_is_recovered_unless_it_holds_letters(
        spark, redis_server, tmp_path):
    """Under the suffix rule, ``pay:dlq`` is an application stream that happens to end with
    ``:dlq`` (nobody's dead-letter stream: ``pay``'s is ``{pay}:dlq``), matched by
    ``streams.match = "pay*"``. Before: dropped by its name alone with an INFO line, its
    stuck entries never recovered, status ok. Now decided by what it holds: a source, while
    ``{pay}:dlq``, holding the letters of the first run, stays a dead-letter stream."""
    client = redis_server.client()
    ids = {s: stuck(client, s, "billing") for s in ("pay", "pay:dlq")}
    result = run_in_process(spark, args(redis_server, tmp_path, "streams.match=*pay*"))
    assert result.code == 0, result.stderr[-2000:]
    assert {u["stream"] for u in result.summary["units"]} == {"pay", "pay:dlq"}
    for stream in ("pay", "pay:dlq"):
        assert pel(client, stream, "billing") == {}
        letters = client.xrange("{" + stream + "}:dlq")
        assert [f[b"x-original-id"].decode() for _, f in letters] == ids[stream][:OVER]
    again = run_in_process(spark, args(redis_server, tmp_path, "streams.match=*pay*"))
    assert again.code == 0 and again.summary["units"] == [], again.summary


@pytest.mark.slow
def test_a_stream_the_template_could_name_is_still_recovered(spark, redis_server, tmp_path):
    """With ``{stream}:{group}``, ``orders:v2`` (a stream of its own, no unit's dead-letter
    stream) is recovered like any source; ``orders:billing`` (where orders / billing's
    letters go) is not, and an earlier letter there keeps it a dead-letter stream."""
    client = redis_server.client()
    ids = {s: stuck(client, s, "billing") for s in ("orders", "orders:v2")}
    result = run_in_process(spark, args(redis_server, tmp_path, "streams.match=orders*",
                                        "dead_letter.stream={stream}:{group}"))
    assert result.code == 0, result.stderr[-2000:]
    assert result.summary["status"] == "ok" and result.summary["skipped"] == []
    assert {u["stream"] for u in result.summary["units"]} == {"orders", "orders:v2"}
    for stream, dlq in (("orders", "orders:billing"), ("orders:v2", "orders:v2:billing")):
        assert pel(client, stream, "billing") == {}
        letters = client.xrange(dlq)
        assert [f[b"x-original-id"].decode() for _, f in letters] == ids[stream][:OVER]
        assert {f[b"x-original-stream"].decode() for _, f in letters} == {stream}
    # A second run: orders:billing and orders:v2:billing hold letters, never sources.
    again = run_in_process(spark, args(redis_server, tmp_path, "streams.match=orders*",
                                       "dead_letter.stream={stream}:{group}"))
    assert again.code == 0 and again.summary["skipped"] == []
    assert again.summary["status"] == "ok"


# --- part 3: a dead-letter key of another type ---------------------------------------------

@pytest.mark.slow
def test_a_dead_letter_key_of_another_type_is_the_units_error(spark, redis_version_server,
                                                              tmp_path):
    server = redis_version_server
    client = server.client()
    ids = stuck(client, "wt", "g", n=8)
    client.hset("wt:g", mapping={"owner": "another team", "n": "1"})
    argv = args(server, tmp_path, "streams.keys=wt", "dead_letter.stream={stream}:{group}")
    for _ in range(2):  # run after run: never ok, nothing lost
        age_pending(client, "wt", "g", ids, HOUR_MS)
        result = run_in_process(spark, argv)
        assert result.code == 0, result.stderr[-2000:]
        assert result.summary["status"] == "partial"
        reason = skipped_rows(result.summary)[("wt", "g")]
        assert reason.startswith(TARGET_REFUSED) and "'wt:g' is a hash" in reason
        assert "vanished" not in reason and "dead_letter.stream" in reason
        assert client.hgetall("wt:g") == {b"owner": b"another team", b"n": b"1"}
        assert sorted(pel(client, "wt", "g")) == sorted(ids[:OVER])  # pending, not lost
        assert client.xlen("wt") == 8
    # The metrics an alert fires on: status partial, one skipped unit.
    settings = load_settings(None, [f"redis.url={server.url}", "streams.keys=wt"])
    summary = RunSummary(result.summary["run_id"], status=result.summary["status"],
                         skipped=result.summary["skipped"])
    facts, _ = recovery_facts(settings, summary, 0, 0.0)
    registry = run_registry(facts, 10)
    value = registry.get_sample_value
    assert value("redis_stream_recovery_run_skipped_units") == 1
    assert value("redis_stream_recovery_run_status", {"status": "partial"}) == 1


def letter(source: str = "elsewhere") -> dict[bytes, bytes]:
    """A dead letter of an earlier run (its x-death block)."""
    return {b"n": b"0", b"x-original-stream": source.encode(), b"x-original-id": b"1-1",
            b"x-death-reason": b"max-deliveries-exceeded"}


@pytest.mark.parametrize("content", ["letters then an order", "orders then letters",
                                     "letters read by a group"])
@pytest.mark.slow
def test_the_move_writes_only_into_a_stream_of_letters(spark, redis_server, tmp_path,
                                                       content):
    """Both ends of the target are checked: an application's entries after the letters (a
    name both use) and before them (letters an earlier version wrote into an application
    stream) keep the move out; letters only, read by a team's own group, take more."""
    client = redis_server.client()
    ids = stuck(client, "shop", "eu")
    order = {b"order": b"o-1", b"amount": b"100"}
    first, then = (letter(), order) if content.startswith("letters") else (order, letter())
    client.xadd("shop:eu", first)
    client.xadd("shop:eu", letter() if content.endswith("group") else then)
    client.xgroup_create("shop:eu", "team", id="0")
    client.xreadgroup("team", "reader", {"shop:eu": ">"}, count=1)
    before = snapshot(client, "shop:eu")
    result = run_in_process(spark, args(redis_server, tmp_path, "streams.keys=shop",
                                        "dead_letter.stream={stream}:{group}"))
    assert result.code == 0, result.stderr[-2000:]
    if content.endswith("group"):
        assert result.summary["status"] == "ok" and result.summary["skipped"] == []
        assert pel(client, "shop", "eu") == {}
        added = client.xrange("shop:eu")[2:]
        assert [f[b"x-original-id"].decode() for _, f in added] == ids[:OVER]
        raw = client.execute_command("XRANGE", "shop:eu", "-", "+")
        assert raw[:2] == before["entries"]  # the earlier letters as they were
        assert before["pels"] == {g: pel(client, "shop:eu", g) for g in before["pels"]}
        return
    assert snapshot(client, "shop:eu") == before
    assert result.summary["status"] == "partial"
    reason = skipped_rows(result.summary)[("shop", "eu")]
    assert reason.startswith(TARGET_REFUSED) and "'shop:eu'" in reason
    assert sorted(pel(client, "shop", "eu")) == sorted(ids[:OVER])


@pytest.mark.slow
def test_a_dead_letter_stream_that_is_another_units_retry_stream_is_refused_at_start(
        spark, redis_server, tmp_path):
    """Only the groups tell: ``{orders}:retry`` / g dead-letters into ``{orders}:retry:x``
    (``{stream}:x``), where requeue copies of orders / x go (``{stream}:retry:{group}``)."""
    client = redis_server.client()
    stuck(client, "orders", "x")
    stuck(client, "{orders}:retry", "g")
    before = {k: snapshot(client, k) for k in ("orders", "{orders}:retry")}
    result = run_in_process(spark, args(
        redis_server, tmp_path, "streams.keys=orders,{orders}:retry", "reprocess.mode=requeue",
        "reprocess.requeue_stream={stream}:retry:{group}", "dead_letter.stream={stream}:x"))
    assert result.code == 2, result.stderr[-2000:]
    line = result.stderr.strip().splitlines()[-1]
    assert "'{orders}:retry:x'" in line and "reprocess.requeue_stream" in line
    assert {k: snapshot(client, k) for k in before} == before
    assert not client.exists("{orders}:retry:x")


@pytest.mark.slow
def test_the_dry_run_tells_the_refusal_the_real_run_then_makes(spark, redis_server, tmp_path):
    client = redis_server.client()
    ids = stuck(client, "shop", "eu")
    client.hset("shop:us", "owner", "another team")
    create_group(client, "shop", "us")  # a second group, its dead-letter key a hash
    deliver(client, "shop", "us", DEAD, len(ids))
    make_stuck(client, "shop", "us", DEAD, ids, HOUR_MS)
    make_stuck(client, "shop", "us", DEAD, ids[:OVER], HOUR_MS, 9)
    create_group(client, "shop", "ok")  # a third, nothing over the limit: no refusal
    deliver(client, "shop", "ok", DEAD, len(ids))
    make_stuck(client, "shop", "ok", DEAD, ids, HOUR_MS)
    client.hset("shop:ok", "owner", "another team")
    application_stream(client)
    argv = args(redis_server, tmp_path, "streams.keys=shop",
                "dead_letter.stream={stream}:{group}")
    before = {k: snapshot(client, k) for k in ("shop", "shop:eu")}
    dry = run_in_process(spark, [*argv, "--dry-run"])
    assert dry.code == 0, dry.stderr[-2000:]
    assert {k: snapshot(client, k) for k in before} == before  # a dry run writes nothing
    assert dry.summary["status"] == "partial"
    real = run_in_process(spark, argv)
    assert real.code == 0 and real.summary["status"] == "partial"
    told = skipped_rows(dry.summary)
    assert set(told) == {("shop", "eu"), ("shop", "us")}
    assert told == skipped_rows(real.summary)
    assert "'shop:us' is a hash" in told[("shop", "us")]
    assert client.hgetall("shop:us") == {b"owner": b"another team"}
