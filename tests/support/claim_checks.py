"""One unit's stuck entries, the check that a claim's output matches Redis itself (the
claim tests: tests/unit/executor/claim/test_loop.py,
tests/unit/executor/claim/test_first_steps.py) and live consumers taking entries from a job
consumer mid-claim (tests/unit/executor/test_histogram_live.py,
tests/unit/executor/test_split_histogram_live.py)."""

from __future__ import annotations

from redis import Redis

from recovery.testing.backlog import make_stuck
from tests.support.servers import CLAIM_DROPS_DELETED, has

GROUP, DEAD, JOB = "workers", "crashed", "recovery-r1-0"
LIVE, OTHER = "app-live", "app-other"  # live consumers that take entries from the job
HOUR_MS = 3_600_000


def stuck(client: Redis, stream: str, n: int) -> list[str]:
    """`n` entries delivered once to a consumer that died an hour ago."""
    ids = [client.xadd(stream, {"n": str(i)}).decode() for i in range(n)]
    client.xgroup_create(stream, GROUP, id="0")
    client.xreadgroup(GROUP, DEAD, {stream: ">"})
    make_stuck(client, stream, GROUP, DEAD, ids, HOUR_MS)
    return ids


def job_owns(client: Redis, stream: str) -> dict[str, int]:
    """Entry ID -> delivery count of what the job's consumer owns, by Redis."""
    rows = client.xpending_range(stream, GROUP, "-", "+", 10_000, consumername=JOB)
    return {r["message_id"].decode(): r["times_delivered"] for r in rows}


def assert_matches_redis(rows: list[dict], client: Redis, stream: str) -> None:
    ids = [r["id"] for r in rows]
    assert len(ids) == len(set(ids)), "an entry was output twice"
    live = {r["id"]: r["delivery_count"] for r in rows if not r["deleted"]}
    deleted = {r["id"]: r["delivery_count"] for r in rows if r["deleted"]}
    # Without CLAIM_DROPS_DELETED (6.2) an entry deleted upstream is claimed like any other:
    # its PEL slot stays, now the job's, until the hand-over acks it.
    owned = live if has(client, CLAIM_DROPS_DELETED) else {**live, **deleted}
    assert job_owns(client, stream) == owned


def take_from(client: Redis, stream: str, consumer: str = JOB) -> list[str]:
    """What live consumers do mid-claim: XCLAIM two of `consumer`'s entries (a job
    consumer's) for LIVE, and XAUTOCLAIM a third for OTHER (no minimum idle time: the job
    claimed them moments ago). Returns the three IDs."""
    rows = client.xpending_range(stream, GROUP, "-", "+", 3, consumername=consumer)
    ids = [r["message_id"].decode() for r in rows]
    assert len(ids) == 3, "the claim step claimed too little to take from"
    client.xclaim(stream, GROUP, LIVE, 0, ids[:2])
    client.xautoclaim(stream, GROUP, OTHER, 0, ids[2], count=1)
    return ids
