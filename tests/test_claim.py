"""One unit's claim on its own (recovery.claim.claim_unit), against real servers, no Spark.

What the claim outputs is checked against Redis itself: every entry the job's consumer owns
afterwards is in the output exactly once, with the delivery count Redis has for it.
"""

from __future__ import annotations

import pyarrow as pa
from redis import Redis

from recovery.backlog import make_stuck
from recovery.claim import claim_unit
from recovery.claimed import CLAIMED_ARROW
from recovery.config import executor_params
from recovery.redis_conn import connect
from recovery.throttle import Throttle
from tests.lost_reply import ReplyDropper

GROUP, DEAD, JOB = "workers", "crashed", "recovery-r1-0"
HOUR_MS = 3_600_000


def stuck(client: Redis, stream: str, n: int) -> list[str]:
    """`n` entries delivered once to a consumer that died an hour ago."""
    ids = [client.xadd(stream, {"n": str(i)}).decode() for i in range(n)]
    client.xgroup_create(stream, GROUP, id="0")
    client.xreadgroup(GROUP, DEAD, {stream: ">"})
    make_stuck(client, stream, GROUP, DEAD, ids, HOUR_MS)
    return ids


def claim(url: str, make_settings, stream: str) -> list[dict]:
    settings = make_settings(f'streams.keys=["{stream}"]', f"redis.url={url}", "claim.count=5")
    params = executor_params(settings, "r1")
    client = connect(params.redis)
    try:
        unit = {"stream": stream, "group": GROUP, "consumer": JOB, "part": 0}
        batches = list(claim_unit(client, params, unit, Throttle(None)))
    finally:
        client.close()
    return pa.Table.from_batches(batches, schema=CLAIMED_ARROW).to_pylist()


def job_owns(client: Redis, stream: str) -> dict[str, int]:
    """Entry ID -> delivery count of what the job's consumer owns, by Redis."""
    rows = client.xpending_range(stream, GROUP, "-", "+", 10_000, consumername=JOB)
    return {r["message_id"].decode(): r["times_delivered"] for r in rows}


def assert_matches_redis(rows: list[dict], client: Redis, stream: str) -> None:
    ids = [r["id"] for r in rows]
    assert len(ids) == len(set(ids)), "an entry was output twice"
    live = {r["id"]: r["delivery_count"] for r in rows if not r["deleted"]}
    assert live == job_owns(client, stream)


def test_a_claim_step_whose_reply_was_lost_is_taken_back(server, client, make_settings):
    """The 2nd step's MULTI runs but its reply never arrives; redis-py sends it again and the
    second send skips what the first claimed (no longer idle). Those 5 are taken back."""
    ids = stuck(client, "s", 30)
    proxy = ReplyDropper(server.port, b"XAUTOCLAIM", nth=2)
    try:
        rows = claim(proxy.url(), make_settings, "s")
    finally:
        proxy.close()
    assert proxy.dropped == 1
    assert sorted(r["id"] for r in rows) == sorted(ids)
    assert_matches_redis(rows, client, "s")
    taken_back = [r for r in rows if r["fields"] is None]
    assert len(taken_back) == 5
    assert {r["delivery_count"] for r in taken_back} == {2}


def test_what_an_earlier_attempt_claimed_is_output_once(client, make_settings):
    """5 entries the job's consumer claimed a moment ago (not idle: taken back without
    fields) and 3 it claimed an hour ago (idle: claimed again, with fields), once each; the
    first is the very first entry of the stream, the last the very last."""
    ids = stuck(client, "s", 20)
    fresh = [ids[0], *ids[3:6], ids[19]]
    make_stuck(client, "s", GROUP, JOB, fresh, 0, 2)
    make_stuck(client, "s", GROUP, JOB, ids[12:15], HOUR_MS, 2)
    rows = claim(client_url(client), make_settings, "s")
    assert sorted(r["id"] for r in rows) == sorted(ids)
    assert_matches_redis(rows, client, "s")
    without_fields = {r["id"] for r in rows if r["fields"] is None}
    assert without_fields == set(fresh)
    again = {r["id"]: r for r in rows if r["id"] in ids[12:15]}
    assert all(r["previous_consumer"] == JOB and r["delivery_count"] == 3
               for r in again.values())


def test_entries_deleted_upstream_are_reported_and_the_rest_have_their_counts(
        client, make_settings):
    """Deleted entries among the claimed: reported deleted, and every live entry claimed
    with the count Redis has for it."""
    ids = stuck(client, "s", 20)
    client.xdel("s", *ids[1:4], *ids[8:10])
    rows = claim(client_url(client), make_settings, "s")
    assert sorted(r["id"] for r in rows) == sorted(ids)
    assert_matches_redis(rows, client, "s")
    assert all(r["delivery_count"] == 2 for r in rows if not r["deleted"])
    assert {r["id"] for r in rows if r["deleted"]} == {*ids[1:4], *ids[8:10]}


def client_url(client: Redis) -> str:
    kwargs = client.connection_pool.connection_kwargs
    return f"redis://{kwargs['host']}:{kwargs['port']}/0"
