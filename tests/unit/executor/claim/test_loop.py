"""One unit's claim on its own (recovery.executor.claim.loop.claim_unit, its walk over the
PEL in recovery.executor.claim.walk, and under a backoff schedule the claim script's step,
recovery.redis_io.claim_due), against real servers, no Spark.

What the claim outputs is checked against Redis itself: every entry the job's consumer owns
afterwards is in the output exactly once, with the delivery count Redis has for it.
"""

from __future__ import annotations

import time

import pyarrow as pa
import pytest
from redis import Redis

from recovery.executor.claim.backoff import NotDue
from recovery.executor.claim.loop import claim_steps
from recovery.executor.claim.throttle import Throttle
from recovery.executor.claimed import CLAIMED_ARROW
from recovery.params import Unit
from recovery.redis_io import autoclaim, scripts
from recovery.redis_io.redis_conn import RedisConn
from recovery.settings.model import executor_params, load_settings
from recovery.testing.backlog import make_stuck
from tests.support.claim_checks import DEAD, GROUP, HOUR_MS, JOB, assert_matches_redis, stuck
from tests.support.lost_reply import ReplyDropper
from tests.support.servers import CLAIM_DROPS_DELETED, OLDEST, has, start_server

# A schedule steep enough that an entry delivered twice and idle an hour is not due (10 x the
# 10 min of min_idle_ms), unless the job's consumer owns it.
STEEP = ("claim.backoff_factor=10",)


def claim(url: str, make_settings, stream: str, *overrides: str,
          waiting: NotDue | None = None) -> list[dict]:
    settings = make_settings(f'streams.keys=["{stream}"]', f"redis.url={url}", "claim.count=5",
                             *overrides)
    params = executor_params(settings, "r1")
    with RedisConn.open(params.redis) as conn:
        unit = Unit(stream, GROUP, JOB)
        steps = claim_steps(conn, params, unit, Throttle(None), waiting=waiting)
        batches = [step.claimed.to_arrow() for step in steps]
    return pa.Table.from_batches(batches, schema=CLAIMED_ARROW).to_pylist()


def claims_run(client: Redis) -> dict[str, int]:
    """Calls of XAUTOCLAIM and of EVALSHA the server has run (INFO commandstats)."""
    stats = client.info("commandstats")
    return {name: stats.get(f"cmdstat_{name}", {}).get("calls", 0)
            for name in ("xautoclaim", "evalsha")}


@pytest.mark.parametrize("schedule", [(), STEEP], ids=["xautoclaim", "backoff"])
def test_a_claim_step_whose_reply_was_lost_is_taken_back(server, client, make_settings,
                                                         schedule):
    """The 2nd step's MULTI (or claim script) runs but its reply never arrives; redis-py
    sends it again and the second send skips what the first claimed (no longer idle). Those
    5 are taken back."""
    ids = stuck(client, "s", 30)
    marker = b"XAUTOCLAIM"
    if schedule:  # loaded beforehand, so the 2nd EVALSHA is the 2nd step's
        marker = client.script_load(scripts._source("claim_due")).encode()
    proxy = ReplyDropper(server.port, marker, nth=2)
    try:
        rows = claim(proxy.url(), make_settings, "s", *schedule)
    finally:
        proxy.close()
    assert proxy.dropped == 1
    assert sorted(r["id"] for r in rows) == sorted(ids)
    assert_matches_redis(rows, client, "s")
    taken_back = [r for r in rows if r["fields"] is None]
    assert len(taken_back) == 5
    assert {r["delivery_count"] for r in taken_back} == {2}
    assert (claims_run(client)["xautoclaim"] == 0) is bool(schedule), "not the path asked"


@pytest.mark.parametrize("schedule", [(), STEEP], ids=["xautoclaim", "backoff"])
def test_what_an_earlier_attempt_claimed_is_output_once(client, make_settings, schedule):
    """5 entries the job's consumer claimed a moment ago (not idle: taken back without
    fields) and 3 it claimed an hour ago (idle: claimed again, with fields), once each; the
    first is the very first entry of the stream, the last the very last. Under a schedule
    the 3 are due whatever their count: the job's consumer owns them."""
    ids = stuck(client, "s", 20)
    fresh = [ids[0], *ids[3:6], ids[19]]
    make_stuck(client, "s", GROUP, JOB, fresh, 0, 2)
    make_stuck(client, "s", GROUP, JOB, ids[12:15], HOUR_MS, 2)
    rows = claim(client_url(client), make_settings, "s", *schedule)
    assert sorted(r["id"] for r in rows) == sorted(ids)
    assert_matches_redis(rows, client, "s")
    without_fields = {r["id"] for r in rows if r["fields"] is None}
    assert without_fields == set(fresh)
    again = {r["id"]: r for r in rows if r["id"] in ids[12:15]}
    assert all(r["previous_consumer"] == JOB and r["delivery_count"] == 3
               for r in again.values())


@pytest.mark.parametrize("schedule", [(), STEEP], ids=["xautoclaim", "backoff"])
def test_entries_deleted_upstream_are_reported_and_the_rest_have_their_counts(
        client, make_settings, schedule):
    """Deleted entries among the claimed: reported deleted, and every live entry claimed
    with the count Redis has for it (Redis 6.2 keeps a deleted entry in the PEL, now the
    job's; 7.0 and Valkey drop it at the claim, XAUTOCLAIM and XCLAIM alike)."""
    ids = stuck(client, "s", 20)
    client.xdel("s", *ids[1:4], *ids[8:10])
    rows = claim(client_url(client), make_settings, "s", *schedule)
    assert sorted(r["id"] for r in rows) == sorted(ids)
    assert_matches_redis(rows, client, "s")
    assert all(r["delivery_count"] == 2 for r in rows if not r["deleted"])
    assert {r["id"] for r in rows if r["deleted"]} == {*ids[1:4], *ids[8:10]}


def test_redis_6_2_nil_entries_that_positions_cannot_place_are_found_by_the_own_range_read(
        monkeypatch, tmp_path):
    """The rare case where an entry turns idle between the step's read and its claim (the
    positions then cannot be trusted), forced here on every step: the deleted entries are
    not guessed but read back as the job consumer's own, without fields, so the hand-over
    fetches them, finds them gone and reports them deleted."""
    monkeypatch.setattr(autoclaim, "deleted_by_position", lambda *_: None)
    with start_server(OLDEST) as server:
        client = server.client()
        assert not has(client, CLAIM_DROPS_DELETED), "a server whose claim replies hold nils"
        ids = stuck(client, "s", 20)
        client.xdel("s", *ids[1:4], *ids[8:10])
        rows = claim(server.url, lambda *overrides: load_settings(
            None, [f"report.path={tmp_path}", "claim.min_idle_ms=600000", *overrides]), "s")
        assert sorted(r["id"] for r in rows) == sorted(ids)
        assert_matches_redis(rows, client, "s")
        without_fields = {r["id"] for r in rows if r["fields"] is None}
        assert without_fields == {*ids[1:4], *ids[8:10]}


def client_url(client: Redis) -> str:
    kwargs = client.connection_pool.connection_kwargs
    return f"redis://{kwargs['host']}:{kwargs['port']}/0"


# delivery count before the run, idle ms, due under factor 2 from 10 min, capped at 2,000 s
# (limit 5: an entry delivered 5 times or more is dead-lettered when claimed).
SCHEDULED = [
    (1, 700_000, True),        # waits 10 min
    (2, 1_150_000, False),     # waits 20 min: due in 50 s
    (2, 1_300_000, True),
    (3, 1_900_000, False),     # waits 40 min, capped at 2,000 s: due in 100 s
    (3, 2_100_000, True),      # due only through the cap
    (4, 2_100_000, True),
    (5, 700_000, True),        # its next delivery is over the limit: due at 10 min
    (9, 700_000, True),
    (1, 100_000, False),       # not idle enough for any claim: neither claimed nor counted
]


@pytest.mark.parametrize("deleted", [False, True], ids=["live", "deleted"])
def test_a_schedule_claims_the_due_entries_and_counts_the_rest(client, make_settings, deleted):
    """Every count its own wait: the due entries are claimed (a deleted one reported deleted
    as XAUTOCLAIM would), those not due are left to their owner with their counts, counted,
    with the moment the first becomes due. Five rows per step: the choice spans pages."""
    ids = stuck(client, "s", len(SCHEDULED) * 2)
    for i, (count, idle, _) in enumerate(SCHEDULED):
        make_stuck(client, "s", GROUP, DEAD, ids[2 * i : 2 * i + 2], idle, count)
    if deleted:
        client.xdel("s", ids[0], ids[3], ids[13])  # a due one, a not due one, a dead letter
    before = {r["message_id"].decode(): r for r in
              client.xpending_range("s", GROUP, "-", "+", 100)}
    waiting = NotDue()
    at_ms = int(time.time() * 1000)
    rows = claim(client_url(client), make_settings, "s", "claim.backoff_factor=2",
                 "claim.backoff_max_ms=2000000", waiting=waiting)

    due = {i for n, (*_, is_due) in enumerate(SCHEDULED) if is_due for i in ids[2 * n : 2 * n + 2]}
    assert sorted(r["id"] for r in rows) == sorted(due)
    assert_matches_redis(rows, client, "s")
    gone = {ids[0], ids[13]} if deleted else set()
    assert {r["id"] for r in rows if r["deleted"]} == gone
    assert all(r["delivery_count"] == before[r["id"]]["times_delivered"] + 1
               for r in rows if not r["deleted"])
    left = {r["message_id"].decode(): r for r in
            client.xpending_range("s", GROUP, "-", "+", 100, consumername=DEAD)}
    assert set(left) == set(ids) - due  # a deleted entry not due stays, like any not due
    assert all(left[i]["times_delivered"] == before[i]["times_delivered"] for i in left)
    assert waiting.entries == 4
    assert waiting.next_due_ms is not None
    assert 45_000 <= waiting.next_due_ms - at_ms <= 50_500


@pytest.mark.parametrize("factor", [None, "1"], ids=["unset", "one"])
def test_without_a_schedule_the_claim_is_xautoclaim_as_before(client, make_settings, factor):
    """Unset or 1: every idle entry is claimed whatever its count, with XAUTOCLAIM (no
    script runs), and nothing is counted not due."""
    ids = stuck(client, "s", 12)
    make_stuck(client, "s", GROUP, DEAD, ids[:6], 700_000, 4)
    waiting = NotDue()
    overrides = [f"claim.backoff_factor={factor}"] if factor else []
    rows = claim(client_url(client), make_settings, "s", *overrides,
                 "claim.backoff_max_ms=5000000", waiting=waiting)
    assert sorted(r["id"] for r in rows) == sorted(ids)
    assert_matches_redis(rows, client, "s")
    runs = claims_run(client)
    assert runs["xautoclaim"] >= 3 and runs["evalsha"] == 0
    assert waiting == NotDue()
