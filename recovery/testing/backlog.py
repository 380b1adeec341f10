"""Seeding stuck backlogs (demo, tests, benchmark): real Redis commands, no sleeping.

Entries are made "stuck" the way a crashed consumer leaves them: delivered with XREADGROUP and
never acked. XCLAIM ... IDLE ms RETRYCOUNT n JUSTID then sets their idle time and delivery
count exactly, so a backlog that looks hours old is seeded in milliseconds.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import redis

FieldsFn = Callable[[int], dict[bytes | str, bytes | str]]
CHUNK = 1000


def add_entries(client: redis.Redis, stream: str, count: int, fields: FieldsFn) -> list[str]:
    """XADD `count` entries (pipelined); returns their IDs in order."""
    ids: list[str] = []
    for start in range(0, count, CHUNK):
        pipe = client.pipeline(transaction=False)
        for i in range(start, min(count, start + CHUNK)):
            pipe.xadd(stream, fields(i))  # type: ignore[arg-type]
        ids += [i.decode() if isinstance(i, bytes) else i for i in pipe.execute()]
    return ids


def create_group(client: redis.Redis, stream: str, group: str) -> None:
    """XGROUP CREATE from the start of the stream (MKSTREAM)."""
    client.xgroup_create(stream, group, id="0", mkstream=True)


def deliver(client: redis.Redis, stream: str, group: str, consumer: str, count: int
            ) -> list[str]:
    """XREADGROUP `count` new entries to `consumer` (they become pending); their IDs."""
    ids: list[str] = []
    while len(ids) < count:
        reply: Any = client.xreadgroup(group, consumer, {stream: ">"},
                                       count=min(CHUNK, count - len(ids)))
        if not reply:
            break
        ids += [e[0].decode() for e in reply[0][1]]
    return ids


def make_stuck(client: redis.Redis, stream: str, group: str, consumer: str,
               ids: Sequence[str], idle_ms: int, delivery_count: int = 1) -> None:
    """Give pending `ids` to `consumer` with this idle time (ms) and delivery count."""
    for start in range(0, len(ids), CHUNK):
        chunk: list[Any] = list(ids[start : start + CHUNK])
        client.xclaim(stream, group, consumer, 0, chunk, idle=idle_ms,
                      retrycount=delivery_count, justid=True)


def demo_fields(i: int) -> dict[bytes | str, bytes | str]:
    """A small order event; every 50th one is poison for the example handler."""
    fields: dict[bytes | str, bytes | str] = {
        "order_id": f"o-{i:06d}", "amount_cents": str(1000 + i % 997), "currency": "EUR",
        "payload": b"\x00\xffbinary\xfe",
    }
    if i % 50 == 7:
        fields["poison"] = "1"
    return fields


def seed_demo_backlog(client: redis.Redis, per_stream: int = 2000) -> str:
    """Three streams, two groups, a crashed consumer, poison and deleted entries.

    Returns a one-paragraph description for the demo's output.
    """
    hour_ms = 3_600_000
    for stream in ("orders", "payments", "shipments{eu}"):
        ids = add_entries(client, stream, per_stream, demo_fields)
        for group in ("billing", "analytics"):
            create_group(client, stream, group)
            stuck = deliver(client, stream, group, "worker-1-crashed", per_stream * 3 // 4)
            make_stuck(client, stream, group, "worker-1-crashed", stuck, idle_ms=hour_ms)
            make_stuck(client, stream, group, "worker-1-crashed", stuck[::40], hour_ms, 9)
            deliver(client, stream, group, "worker-2-live", per_stream // 8)
        client.xdel(stream, *ids[5:25])
    return (
        f"3 streams x {per_stream} entries, groups billing and analytics: 75% pending on the "
        "crashed consumer worker-1-crashed for an hour (every 40th delivered 9 times: "
        "poison), 12.5% just delivered to worker-2-live (not idle: left alone), 20 entries "
        "per stream deleted upstream, every 50th entry carries a poison field that the "
        "example handler rejects."
    )
