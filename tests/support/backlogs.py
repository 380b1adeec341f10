"""A realistic stuck backlog for end-to-end tests, with the expected fate of every entry."""

from __future__ import annotations

from dataclasses import dataclass, field

from redis import Redis

from recovery.testing.backlog import add_entries, create_group, deliver, make_stuck
from tests.support.handlers import CHECKSUM, checksum

HOUR_MS = 3_600_000
DEAD = "worker-dead"
LIVE = "worker-live"


@dataclass
class Seeded:
    """Expected outcome per (stream, group, id): the report action, the final Redis state."""

    action: dict[tuple[str, str, str], str] = field(default_factory=dict)
    state: dict[tuple[str, str, str], str] = field(default_factory=dict)
    kind: dict[tuple[str, str, str], str] = field(default_factory=dict)


def binary_fields(i: int, kind: str) -> dict[bytes, bytes]:
    """Fields with non-UTF-8 names and values, an empty value, and a checksum."""
    fields: dict[bytes, bytes] = {
        b"kind": kind.encode(),
        b"n": str(i).encode(),
        b"\xff\xfe-raw-name": bytes(range(256))[i % 200 :],
        b"empty": b"",
    }
    if kind in ("fail", "fail_at_limit"):
        fields[b"fail"] = b"1"
    if kind == "rejected":
        fields[b"reject"] = b"1"
    fields[CHECKSUM] = checksum(list(fields.items()))
    return fields


# kind -> (how many per unit, delivery count before the run, idle, expected action, state)
PLAN = {
    "ok": (120, 1, HOUR_MS, "reprocessed", "acked"),
    "poison": (12, 9, HOUR_MS, "dead_lettered", "dead_lettered"),
    "fail": (10, 1, HOUR_MS, "failed", "pending:job"),
    "fail_at_limit": (6, 4, HOUR_MS, "dead_lettered", "dead_lettered"),
    "deleted": (8, 1, HOUR_MS, "deleted", "gone"),
    "fresh": (10, 1, 0, "", "pending:" + LIVE),
}


def seed(client: Redis, streams: list[str], groups: list[str]) -> Seeded:
    """Every kind of PLAN for every (stream, group); max_deliveries must be 5."""
    seeded = Seeded()
    for stream in streams:
        ids_by_kind: dict[str, list[str]] = {}
        for kind, (count, *_rest) in PLAN.items():
            ids_by_kind[kind] = add_entries(client, stream, count,
                                            lambda i, k=kind: binary_fields(i, k))
        for group in groups:
            create_group(client, stream, group)
            for kind, (count, deliveries, idle, action, state) in PLAN.items():
                ids = deliver(client, stream, group, DEAD if idle else LIVE, count)
                assert ids == ids_by_kind[kind]
                make_stuck(client, stream, group, DEAD if idle else LIVE, ids, idle, deliveries)
                for entry_id in ids:
                    key = (stream, group, entry_id)
                    seeded.state[key] = state
                    seeded.kind[key] = kind
                    if action:
                        seeded.action[key] = action
        client.xdel(stream, *ids_by_kind["deleted"])
    return seeded


def age_pending(client: Redis, stream: str, group: str, ids: list[str], idle_ms: int) -> None:
    """Let time pass for pending `ids`: same owner, same delivery count, older."""
    rows = client.xpending_range(stream, group, "-", "+", 1_000_000)
    wanted = set(ids)
    for row in rows:
        entry_id = row["message_id"].decode()
        if entry_id in wanted:
            make_stuck(client, stream, group, row["consumer"].decode(), [entry_id], idle_ms,
                       row["times_delivered"])
