"""Checks of Redis itself after a run: where did every seeded entry end up?

Every seeded entry must be exactly one of: acked (gone from the PEL, not in the DLQ),
in the dead-letter stream exactly once, still pending, or deleted upstream.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from redis import Redis

from recovery.redis_io.dlq_names import dead_letter_key

Key = tuple[str, str, str]  # stream, group, id


@dataclass(frozen=True)
class Pending:
    consumer: str
    delivery_count: int


def pel(client: Redis, stream: str, group: str) -> dict[str, Pending]:
    """The whole PEL of a group: id -> (owner, delivery count)."""
    rows = client.xpending_range(stream, group, "-", "+", 1_000_000)
    return {r["message_id"].decode(): Pending(r["consumer"].decode(), r["times_delivered"])
            for r in rows}


# The health histogram's delivery-count buckets as docs/DESIGN.md names them:
# (exclusive upper bound, label); larger counts are ">100".
DELIVERY_BUCKETS = ((2, "1"), (3, "2"), (4, "3"), (6, "4-5"), (11, "6-10"), (101, "11-100"))


def pel_by_delivery_count(client: Redis, stream: str, group: str) -> dict[str, int]:
    """A group's PEL as XPENDING shows it now, counted by the health histogram's buckets."""
    counts: Counter[str] = Counter()
    for r in client.xpending_range(stream, group, "-", "+", 1_000_000):
        n = r["times_delivered"]
        counts[next((label for upper, label in DELIVERY_BUCKETS if n < upper), ">100")] += 1
    return dict(counts)


def dead_letters(client: Redis, stream: str, suffix: str = ":dlq") -> list[dict[bytes, bytes]]:
    """All entries of the stream's DLQ as field dicts (last value wins on duplicates)."""
    return [dict(fields) for _, fields in client.xrange(dead_letter_key(stream, suffix))]


def dead_letter_counts(client: Redis, streams: list[str]) -> Counter[Key]:
    """How often each (stream, group, original id) is in a DLQ."""
    counts: Counter[Key] = Counter()
    for stream in streams:
        for f in dead_letters(client, stream):
            counts[(f[b"x-original-stream"].decode(), f[b"x-original-group"].decode(),
                    f[b"x-original-id"].decode())] += 1
    return counts


def final_states(client: Redis, seeded: dict[Key, object]) -> dict[Key, str]:
    """``acked`` | ``dead_lettered`` | ``pending:<owner>`` per seeded entry; asserts that no
    entry is in a DLQ twice or both pending and dead-lettered."""
    streams = sorted({k[0] for k in seeded})
    dlq = dead_letter_counts(client, streams)
    dupes = {k: n for k, n in dlq.items() if n > 1}
    assert not dupes, f"dead-lettered more than once: {dupes}"
    pels = {(s, g): pel(client, s, g) for s, g, _ in seeded}
    states: dict[Key, str] = {}
    for key in seeded:
        pending = pels[(key[0], key[1])].get(key[2])
        assert not (pending and dlq[key]), f"{key} is both pending and dead-lettered"
        if pending:
            states[key] = f"pending:{pending.consumer}"
        elif dlq[key]:
            states[key] = "dead_lettered"
        else:
            states[key] = "acked"
    return states
