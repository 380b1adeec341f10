"""Shared by the per-key order tests (tests/integration/test_order.py,
tests/integration/attacks/test_attack_order.py): the job's command line with a key field, a
seeded backlog of interleaved keys, what the recording handler (tests/support/order_handler.py)
saw, the PEL's owners and counts, report rows."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

from redis import Redis

from recovery.testing.backlog import add_entries, create_group, deliver, make_stuck
from tests.support.backlogs import DEAD, HOUR_MS
from tests.support.fault_tools import GROUP, report_rows

STREAM = "orders"
HANDLER = "handler.path=tests.support.order_handler:in_order"


def args(url: str, reports: Path, *overrides: str) -> list[str]:
    """The job's ``--set`` arguments for `STREAM` in per-key order (key field ``k``)."""
    sets = [f"redis.url={url}", f"report.path={reports}", f"streams.keys={STREAM}",
            "claim.max_deliveries=5", HANDLER, "order.key_field=k", *overrides]
    return [a for s in sets for a in ("--set", s)]


def seed(client: Redis, keys: int, per_key: int, keyless: int = 0, stream: str = STREAM,
         prefix: str = "k") -> dict[str, list[str]]:
    """Stuck entries of `keys` keys interleaved (entry i has key <prefix><i % keys>), plus
    `keyless` entries without a key; key -> its IDs in ID order (keyless under "-")."""
    create_group(client, stream, GROUP)
    n = keys * per_key
    ids = add_entries(client, stream, n, lambda i: {"k": f"{prefix}{i % keys}", "n": str(i)})
    ids += add_entries(client, stream, keyless, lambda i: {"n": f"x{i}"})
    assert deliver(client, stream, GROUP, DEAD, len(ids)) == ids
    make_stuck(client, stream, GROUP, DEAD, ids, HOUR_MS)
    by_key: dict[str, list[str]] = defaultdict(list)
    for i, entry_id in enumerate(ids):
        by_key[f"{prefix}{i % keys}" if i < n else "-"].append(entry_id)
    return dict(by_key)


def recorded(client: Redis, prefix: str, keys: list[str]) -> dict[str, list[str]]:
    """Key -> the IDs the handler recorded under `prefix` for it, in call order."""
    return {k: [v.decode() for v in client.lrange(prefix + k, 0, -1)] for k in keys}


def pending_owners(client: Redis) -> dict[str, str]:
    """`STREAM`'s PEL: ID -> owner."""
    rows = client.xpending_range(STREAM, GROUP, "-", "+", 100_000)
    return {r["message_id"].decode(): r["consumer"].decode() for r in rows}


def deliveries(client: Redis) -> dict[str, int]:
    """`STREAM`'s PEL: ID -> delivery count."""
    rows = client.xpending_range(STREAM, GROUP, "-", "+", 100_000)
    return {r["message_id"].decode(): r["times_delivered"] for r in rows}


def age(client: Redis, ids: list[str]) -> None:
    """Make the job's held entries idle an hour (owner and count as they are)."""
    owners = pending_owners(client)
    for entry_id in ids:
        client.xclaim(STREAM, GROUP, owners[entry_id], 0, [entry_id], idle=HOUR_MS,
                      justid=True)


def rows_of(spark: Any, reports: Path, summary: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The run's report rows by ID (each ID once)."""
    rows = report_rows(spark, reports, summary["run_id"])
    assert rows is not None
    by_id = {r["id"]: r for r in rows}
    assert len(by_id) == len(rows), "an entry reported twice"
    return by_id
