"""Parts of a split unit claiming through their shared cursor
(recovery.executor.claim.shared), on their own, against real servers, no Spark.

Checked against Redis itself: the parts' outputs together hold every entry exactly once,
each part's output is what its consumer owns afterwards, with the delivery counts Redis has.
"""

from __future__ import annotations

import pyarrow as pa
import pytest
from redis import Redis

from recovery.executor.claim.loop import claim_steps
from recovery.executor.claim.throttle import Throttle
from recovery.executor.claimed import CLAIMED_ARROW
from recovery.params import Unit
from recovery.redis_io import scripts
from recovery.redis_io.redis_conn import RedisConn
from recovery.redis_io.split_cursors import cursor_key, open_cursors, ranges_key
from recovery.settings.model import executor_params
from tests.support.claim_checks import GROUP, JOB, stuck
from tests.support.lost_reply import ReplyDropper

OTHER = "recovery-r1-1"  # the other part's consumer
STEEP = ("claim.backoff_factor=10",)


def shared_unit(client: Redis, stream: str, consumer: str = JOB) -> Unit:
    """A part of `stream`'s split unit; its cursor created (once per stream) at the start."""
    key = cursor_key(stream, GROUP, "r1", "n1")
    assert key is not None
    if not client.exists(key):
        assert open_cursors(client, [key]) is None
    return Unit(stream, GROUP, consumer, key)


def part_steps(url: str, make_settings, unit: Unit, *overrides: str):
    """The part's claim steps, lazily (a generator: a test can stop it between steps, as a
    failed task attempt stops)."""
    settings = make_settings(f'streams.keys=["{unit.stream}"]', f"redis.url={url}",
                             "claim.count=5", *overrides)
    params = executor_params(settings, "r1")
    with RedisConn.open(params.redis) as conn:
        yield from claim_steps(conn, params, unit, Throttle(None))


def rows_of(steps) -> list[dict]:
    return pa.Table.from_batches([s.claimed.to_arrow() for s in steps],
                                 schema=CLAIMED_ARROW).to_pylist()


def owned_by(client: Redis, stream: str, consumer: str) -> dict[str, int]:
    """Entry ID -> delivery count of what `consumer` owns, by Redis."""
    rows = client.xpending_range(stream, GROUP, "-", "+", 10_000, consumername=consumer)
    return {r["message_id"].decode(): r["times_delivered"] for r in rows}


def live_counts(rows: list[dict]) -> dict[str, int]:
    return {r["id"]: r["delivery_count"] for r in rows if not r["deleted"]}


@pytest.mark.parametrize("schedule", [(), STEEP], ids=["no-schedule", "backoff"])
def test_two_parts_taking_turns_take_every_entry_once(server, client, make_settings,
                                                      schedule):
    """Two parts step in turns through one cursor: each entry is in exactly one part's
    output, each output is exactly what its consumer owns, and every step read its own
    range (the parts' lists of ranges hold every step, none twice)."""
    ids = stuck(client, "s", 47)
    a = part_steps(server.url, make_settings, shared_unit(client, "s"), *schedule)
    b = part_steps(server.url, make_settings, shared_unit(client, "s", OTHER), *schedule)
    out: dict[str, list] = {JOB: [], OTHER: []}
    live = {JOB: a, OTHER: b}
    while live:
        for name, steps in list(live.items()):
            step = next(steps, None)
            if step is None:
                del live[name]
            else:
                out[name].append(step)
    rows = {name: rows_of(steps) for name, steps in out.items()}
    assert rows[JOB] and rows[OTHER], "one part took everything: no turns were taken"
    got = [r["id"] for part in rows.values() for r in part]
    assert sorted(got) == sorted(ids) and len(got) == len(set(got))
    for name in (JOB, OTHER):
        assert live_counts(rows[name]) == owned_by(client, "s", name)
        assert {r["delivery_count"] for r in rows[name]} == {2}
    unit = shared_unit(client, "s")
    assert client.get(unit.cursor) == b"done"
    ranges = [r for c in (JOB, OTHER)
              for r in client.lrange(ranges_key(unit.cursor, c), 0, -1)]
    assert len(ranges) == len(set(ranges)) == 47 // 5 + 1


def test_a_retried_part_takes_back_what_its_failed_attempt_claimed(server, client,
                                                                    make_settings):
    """Part A's first attempt claims two steps (10 entries) and dies before handing them
    over; part B takes the rest; A's retry walks A's earlier ranges again and outputs
    exactly those 10 (taken back, without fields, delivered once more), nothing else."""
    ids = stuck(client, "s", 33)
    first = part_steps(server.url, make_settings, shared_unit(client, "s"))
    claimed = rows_of([next(first), next(first)])
    first.close()  # the attempt dies
    assert len(claimed) == 10
    rows_b = rows_of(part_steps(server.url, make_settings, shared_unit(client, "s", OTHER)))
    retry = rows_of(part_steps(server.url, make_settings, shared_unit(client, "s")))
    assert sorted(r["id"] for r in retry) == sorted(r["id"] for r in claimed)
    assert all(r["fields"] is None and r["delivery_count"] == 2 for r in retry)
    assert sorted(r["id"] for r in retry + rows_b) == sorted(ids)
    assert live_counts(retry) == owned_by(client, "s", JOB)
    assert live_counts(rows_b) == owned_by(client, "s", OTHER)


def test_a_shared_step_whose_reply_was_lost_is_taken_back(server, client, make_settings):
    """The 2nd step's script runs but its reply never arrives; redis-py sends it again and
    the second send takes the next range. The lost range is in the part's list: walked
    again at the end, its 5 entries are taken back."""
    ids = stuck(client, "s", 30)
    unit = shared_unit(client, "s")
    sha = client.script_load(scripts._source("claim_due")).encode()
    proxy = ReplyDropper(server.port, sha, nth=2)
    try:
        rows = rows_of(part_steps(proxy.url(), make_settings, unit))
    finally:
        proxy.close()
    assert proxy.dropped == 1
    assert sorted(r["id"] for r in rows) == sorted(ids)
    assert live_counts(rows) == owned_by(client, "s", JOB)
    taken_back = [r for r in rows if r["fields"] is None]
    assert len(taken_back) == 5 and {r["delivery_count"] for r in taken_back} == {2}


def test_a_cursor_gone_from_redis_ends_the_part_and_touches_nothing(server, client,
                                                                   make_settings):
    """A missing cursor (deleted, expired) reads as done: the part claims nothing, the
    entries stay with their owner for the next run."""
    stuck(client, "s", 12)
    unit = shared_unit(client, "s")
    client.delete(unit.cursor)
    assert rows_of(part_steps(server.url, make_settings, unit)) == []
    assert owned_by(client, "s", JOB) == {}
    assert len(owned_by(client, "s", "crashed")) == 12
