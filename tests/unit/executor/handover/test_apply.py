"""The hand-over stage on its own (recovery.executor.handover.apply.apply_batch), against real
servers, no Spark: entries made ready (recovery.executor.handover.ready: taken back, deleted
since) and handed to the handler (recovery.executor.handover.modes.handler).

A CLAIMED batch is built the way the claim hands it over; what the handler saw, the report
and the PEL are then checked against Redis itself. Fast: each test is a few round trips.
"""

from __future__ import annotations

import json
import re
import time
from collections import Counter

import pyarrow as pa
import pytest
from redis import Redis

from recovery.executor.claimed import Claimed
from recovery.executor.handover.apply import apply_batch
from recovery.executor.handover.lease import REASON_GONE, REASON_VANISHED, _ack_and_lease
from recovery.executor.handover.routed import RoutedBatch
from recovery.redis_io.dlq_names import dead_letter_key
from recovery.redis_io.redis_conn import connect
from recovery.schemas import CLAIMED, Action, arrow
from recovery.settings.model import executor_params
from tests.support.handlers import IDLE_AT_CALL, LIVE_ACK_URL_ENV, MEANWHILE_ENV, SEEN

GROUP, DEAD, JOB = "workers", "crashed", "recovery-r1-0"


def claimed_entries(client: Redis, stream: str, n: int) -> list[tuple[str, dict]]:
    """`n` entries delivered to a dead consumer, then claimed by the job's consumer."""
    ids = [client.xadd(stream, {"n": str(i)}).decode() for i in range(n)]
    client.xgroup_create(stream, GROUP, id="0")
    client.xreadgroup(GROUP, DEAD, {stream: ">"})
    client.xclaim(stream, GROUP, JOB, 0, ids)  # the job's claim: delivery count 2
    return [(i, {"n": str(k)}) for k, i in enumerate(ids)]


def routed(stream: str, entries: list[tuple[str, dict]]) -> pa.RecordBatch:
    rows = [{"stream": stream, "group": GROUP, "consumer": JOB, "id": i, "deleted": False,
             "previous_consumer": DEAD, "idle_ms": 3_600_000,
             "fields": [{"name": k.encode(), "value": v.encode()} for k, v in f.items()],
             "delivery_count": 2} for i, f in entries]  # within the limit: handled
    return pa.RecordBatch.from_pylist(rows, schema=arrow(CLAIMED))


def run_apply(server, make_settings, batch: pa.RecordBatch, *extra: str,
              handler: str = "ack_first_meanwhile", claimed_s_ago: float | None = None
              ) -> list[dict]:
    """apply_batch on `batch`; `claimed_s_ago`: the batch comes straight from a claim sent
    that long ago (one pass), else it comes from a checkpoint (no reading of its own)."""
    settings = make_settings('streams.keys=["s"]', f"handler.path=tests.support.handlers:{handler}",
                             "handler.batch_size=4", *extra)
    params = executor_params(settings, "r1")
    client = connect(params.redis)
    try:
        read_at = None if claimed_s_ago is None else time.monotonic() - claimed_s_ago
        return apply_batch(client, params, Claimed.from_arrow(batch), read_at).to_pylist()
    finally:
        client.close()


@pytest.fixture
def live_acks(server, monkeypatch):
    monkeypatch.setenv(LIVE_ACK_URL_ENV, server.url)


def test_acks_by_someone_else_during_a_call_are_reported_and_nothing_is_left(
        server, client, make_settings, live_acks):
    entries = claimed_entries(client, "s", 10)
    report = run_apply(server, make_settings, routed("s", entries))

    assert [r["id"] for r in report] == [i for i, _ in entries]
    assert {r["action"] for r in report} == {"reprocessed"}
    # Three calls (4, 4, 2 entries): in each, the handler's "live consumer" acked the first
    # entry. The job's XACKs say how many of the entries they covered were acked already.
    pattern = re.compile(r"handled; (\d+) of the (\d+) entries acked with it had been acked "
                         r"by another consumer since their lease")
    groups = Counter(r["reason"] for r in report)
    counts = [tuple(map(int, pattern.fullmatch(reason).groups())) for reason in groups]
    assert sum(k for k, _ in counts) == 3
    assert sorted(n for _, n in counts) == sorted(groups.values())
    assert client.xpending("s", GROUP)["pending"] == 0
    assert [i.decode() for i in client.lrange(SEEN, 0, -1)] == [i for i, _ in entries]


def test_entries_acked_or_taken_before_their_lease_are_never_handed_over(
        server, client, make_settings, live_acks):
    entries = claimed_entries(client, "s", 9)
    ids = [i for i, _ in entries]
    client.xack("s", GROUP, ids[5])            # a live consumer finished it after our claim
    client.xclaim("s", GROUP, "other-run", 0, [ids[6]])  # another run took it
    report = {r["id"]: r for r in run_apply(server, make_settings, routed("s", entries))}

    seen = [i.decode() for i in client.lrange(SEEN, 0, -1)]
    assert ids[5] not in seen and ids[6] not in seen
    assert report[ids[5]]["action"] == report[ids[6]]["action"] == "skipped"
    assert "no longer pending for the job's consumer" in report[ids[6]]["reason"]
    assert sorted(seen) == sorted(set(ids) - {ids[5], ids[6]})
    # The other run's entry is still its own; nothing of the job's is left pending.
    rows = client.xpending_range("s", GROUP, "-", "+", 100)
    assert [(r["message_id"].decode(), r["consumer"].decode()) for r in rows] == [
        (ids[6], "other-run")]


@pytest.mark.parametrize("claimed_s_ago", [0.0, 1.0])
def test_a_claim_younger_than_the_lease_reading_limit_is_the_first_reading(
        server, client, make_settings, live_acks, claimed_s_ago):
    """One pass: a claim sent less than LEASE_FRESH_S (0.1 s) ago is itself the reading, so an
    ack since then is not looked for (the documented window); from an older claim the lease
    is read first, and an entry acked since is not handed over."""
    entries = claimed_entries(client, "s", 9)
    ids = [i for i, _ in entries]
    client.xack("s", GROUP, ids[5])  # a live consumer finished it after our claim
    report = {r["id"]: r for r in run_apply(server, make_settings, routed("s", entries),
                                            "handler.batch_size=100",
                                            claimed_s_ago=claimed_s_ago)}
    seen = [i.decode() for i in client.lrange(SEEN, 0, -1)]
    fresh = claimed_s_ago < 0.1
    assert (ids[5] in seen) is fresh
    assert report[ids[5]]["action"] == ("reprocessed" if fresh else "skipped")
    assert sorted(set(seen) - {ids[5]}) == sorted(set(ids) - {ids[5]})
    assert client.xpending("s", GROUP)["pending"] == 0


def test_an_old_lease_is_renewed_before_the_call(server, client, make_settings, live_acks):
    """min_idle 400 ms, timeout 0.1 s: a claim older than 300 ms must be renewed (XCLAIM
    resets its idle time) before the hand-over; the delivery count stays as it was."""
    entries = claimed_entries(client, "s", 3)
    time.sleep(0.5)
    before = time.monotonic()
    report = run_apply(server, make_settings, routed("s", entries), "claim.min_idle_ms=400",
                       "handler.timeout_s=0.1", "handler.batch_size=100")
    elapsed_ms = (time.monotonic() - before) * 1000
    assert [r["action"] for r in report] == ["reprocessed"] * 3
    # The first entry was acked by the handler's live consumer; the two others by the job.
    # The renewal shows in XINFO CONSUMERS: the job's consumer was seen (XCLAIM) during
    # apply_batch; without it, its last activity is the claim, 500 ms before.
    consumers = {c["name"].decode(): c for c in client.xinfo_consumers("s", GROUP)}
    assert consumers[JOB]["idle"] <= elapsed_ms + 50, (consumers[JOB], elapsed_ms)


def test_an_entry_read_near_its_fresh_limit_is_renewed_before_the_call(
        server, client, make_settings, live_acks):
    """min_idle 3000 ms, timeout 2 s: a call must end before an entry has been idle 3 s, so
    one claimed less than 1 s ago needs no renewal. But a reading serves the calls of the
    next LEASE_FRESH_S (0.1 s): an entry read idle 900-999 ms and handed over up to 0.1 s
    later could reach 3 s before a 2 s call ends, and another run could claim it while the
    handler works on it. An entry idle 900 ms at its reading is therefore renewed (idle
    reset) before the call: at the call it has been idle less than 900 ms plus the time
    since it was set so."""
    entries = claimed_entries(client, "s", 3)
    client.xclaim("s", GROUP, JOB, 0, [i for i, _ in entries], idle=900, justid=True)
    set_at = time.monotonic()
    report = run_apply(server, make_settings, routed("s", entries), "claim.min_idle_ms=3000",
                       "handler.timeout_s=2", "handler.batch_size=1",
                       handler="records_idle_at_call")
    assert [r["action"] for r in report] == ["reprocessed"] * 3
    calls = [json.loads(c) for c in client.lrange(IDLE_AT_CALL, 0, -1)]
    assert sorted(c["id"] for c in calls) == sorted(i for i, _ in entries)
    not_renewed = [c for c in calls
                   if c["idle_ms"] >= 900 + (c["before"] - set_at) * 1000 - 5]
    assert not_renewed == [], not_renewed


@pytest.mark.parametrize("meanwhile", ["del", "destroy"])
def test_a_unit_that_vanishes_during_the_call_is_not_reported_acked(
        server, client, make_settings, live_acks, monkeypatch, meanwhile):
    """XACK answers 0 for a missing stream or group, as for entries someone else acked: the
    report must say the stream or group vanished, not that the job acked them."""
    monkeypatch.setenv(MEANWHILE_ENV, meanwhile)
    entries = claimed_entries(client, "s", 3)
    report = run_apply(server, make_settings, routed("s", entries),
                       handler="make_unit_vanish_meanwhile")
    assert [(r["action"], r["reason"]) for r in report] == [
        ("skipped", "handled, but " + REASON_VANISHED + " before the ack")] * 3


def test_an_entry_taken_back_and_deleted_since_is_reported_and_its_slot_cleared(
        server, client, make_settings, live_acks):
    """Rows an earlier task attempt claimed come without fields; one XDELed since then is
    reported deleted, never handed over, and its PEL slot is acked (XDEL leaves it there)."""
    entries = claimed_entries(client, "s", 3)
    gone = entries[1][0]
    client.xdel("s", gone)
    batch = routed("s", entries)
    batch = batch.set_column(batch.schema.get_field_index("fields"), "fields",
                             pa.nulls(batch.num_rows, batch.schema.field("fields").type))
    report = {r["id"]: r for r in run_apply(server, make_settings, batch)}

    assert report[gone]["action"] == "deleted"
    assert {report[i]["action"] for i, _ in entries if i != gone} == {"reprocessed"}
    assert gone.encode() not in [i for i in client.lrange(SEEN, 0, -1)]
    assert client.xpending("s", GROUP)["pending"] == 0


def over_limit(client: Redis, stream: str, n: int) -> pa.RecordBatch:
    """`n` claimed entries of `stream`, delivered more often than the default limit (5)."""
    rows = routed(stream, claimed_entries(client, stream, n)).to_pylist()
    return pa.RecordBatch.from_pylist([{**r, "delivery_count": 9} for r in rows],
                                      schema=arrow(CLAIMED))


def test_script_calls_skip_script_exists_and_survive_a_lost_script_cache(
        server, client, make_settings):
    """Queued script calls cost no SCRIPT EXISTS round trip (redis-py's pipelines ask it
    before every send); when the server has lost its scripts (restart, SCRIPT FLUSH) they
    are loaded and the calls sent once more: each entry is dead-lettered exactly once."""
    run_apply(server, make_settings, over_limit(client, "s", 3))
    client.config_resetstat()
    warm = run_apply(server, make_settings, over_limit(client, "t", 3))
    called = [k for k in client.info("commandstats") if k.startswith("cmdstat_script")]
    assert called == [], f"script management commands sent with the scripts loaded: {called}"
    client.script_flush()
    cold = run_apply(server, make_settings, over_limit(client, "u", 4))
    for stream, rows in (("t", warm), ("u", cold)):
        assert [r["action"] for r in rows] == [Action.DEAD_LETTERED] * len(rows)
        assert client.xlen(dead_letter_key(stream, ":dlq")) == len(rows)
        assert client.xpending(stream, GROUP)["pending"] == 0


def test_a_lease_read_of_rows_spread_thin_reads_them_all_in_few_pages(
        server, client, make_settings):
    """Every 50th of 1,000 entries of the job's consumer (a per-key ordered wave's heads are
    spread so): each row's lease is read, the one acked by someone else is not handed over,
    and the further pages grow (LEASE_PAGE_GROWTH) instead of paging 84 rows at a time."""
    entries = claimed_entries(client, "s", 1000)
    rows = list(range(0, 1000, 50))
    client.xack("s", GROUP, entries[rows[-2]][0])  # acked by someone else before the lease
    rb = RoutedBatch(Claimed.from_arrow(routed("s", entries)), 5)
    job_client = connect(executor_params(make_settings('streams.keys=["s"]'), "r1").redis)
    client.config_resetstat()

    _ack_and_lease(job_client, rb, [], rows, fresh_ms=3_600_000)
    job_client.close()

    calls = client.info("commandstats")["cmdstat_xpending"]["calls"]
    assert calls == 3  # pages of 84, 672 and 5,376 rows over 951 entries (12 of 84 before)
    assert [rb.action[i] for i in rows] == [None] * 18 + ["skipped", None]
    assert rb.reason[rows[-2]] == REASON_GONE
