"""Shared by the dead-letter target tests (tests/integration/test_dead_letter_targets.py and
tests/integration/attacks/test_attack_dead_letters.py): a stuck backlog, another team's view
of a key, the job's command line and the summary's skipped rows."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from redis import Redis

from recovery.testing.backlog import add_entries, create_group, deliver, make_stuck
from recovery.testing.local_redis import LocalServer
from tests.support.backlogs import DEAD, HOUR_MS
from tests.support.invariants import pel

OVER = 5  # of each stuck stream's entries, delivered 9 times: over max_deliveries (5)


def stuck(client: Redis, stream: str, group: str, n: int = 20) -> list[str]:
    """`n` entries of `stream` pending in `group` on a dead consumer for an hour, the first
    OVER of them delivered 9 times; their IDs."""
    ids = add_entries(client, stream, n, lambda i: {b"n": str(i).encode(),
                                                     b"raw": bytes([i, 255, 0])})
    create_group(client, stream, group)
    deliver(client, stream, group, DEAD, n)
    make_stuck(client, stream, group, DEAD, ids, HOUR_MS)
    make_stuck(client, stream, group, DEAD, ids[:OVER], HOUR_MS, 9)
    return ids


def snapshot(client: Redis, key: str) -> dict[str, Any]:
    """What another team sees of `key`: its entries byte for byte, and per group its lag,
    last delivered ID and PEL (owner and delivery count per entry)."""
    raw = client.execute_command("XRANGE", key, "-", "+")
    groups = {g["name"].decode(): (g.get("lag"), g["last-delivered-id"])
              for g in client.xinfo_groups(key)}
    return {"entries": raw, "groups": groups,
            "pels": {g: pel(client, key, g) for g in groups}}


def args(server: LocalServer, reports: Path, *overrides: str) -> list[str]:
    """The job's ``--set`` arguments: the server, the report path, 5 deliveries at most, an
    idle time of 10 minutes, the example handler, then `overrides`."""
    sets = [f"redis.url={server.url}", f"report.path={reports}", "claim.max_deliveries=5",
            "claim.min_idle_ms=600000", "handler.path=recovery.handlers:example_handler",
            *overrides]
    return [a for s in sets for a in ("--set", s)]


def skipped_rows(summary: dict[str, Any]) -> dict[tuple[str, str | None], str]:
    """The summary's skipped rows: (stream, group) -> reason."""
    return {(s["stream"], s["group"]): s["reason"] for s in summary["skipped"]}
