"""Helpers of the split-unit tests (tests/unit/driver/test_split.py): a backlog whose kinds
interleave in the PEL, and what a split run left in Redis (the handler's record of the worker
processes and Spark partitions that handed entries over: ``tests.support.split_handler``)."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Sequence

from redis import Redis

from recovery.redis_io.split_cursors import cursor_key
from recovery.testing.backlog import add_entries, create_group, deliver, make_stuck
from tests.support.backlogs import DEAD, HOUR_MS, LIVE, binary_fields
from tests.support.fault_tools import GROUP, Key
from tests.support.split_handler import SEEN_CONSUMERS, SPLIT_TTLS, WORKERS


def workers(client: Redis) -> tuple[Counter[int], Counter[int]]:
    """Entries handed over per worker process and per Spark partition, as recorded."""
    pids: Counter[int] = Counter()
    partitions: Counter[int] = Counter()
    for key, n in client.hgetall(WORKERS).items():
        pid, partition = map(int, key.decode().split(" "))
        pids[pid] += int(n)
        partitions[partition] += int(n)
    return pids, partitions


def seen_meanwhile(client: Redis) -> tuple[set[str], dict[str, int]]:
    """What the handler saw in Redis during its calls (control ``watch``): the job consumers
    of the group, and each split key with its TTL (ms) when last seen."""
    consumers = {c.decode() for c in client.smembers(SEEN_CONSUMERS)}
    ttls = {k.decode(): int(v) for k, v in client.hgetall(SPLIT_TTLS).items()}
    return consumers, ttls


def seen_cursor(keys: Iterable[str], stream: str, group: str, run_id: str) -> str | None:
    """Among `keys`, the cursor of `stream` / `group` in run `run_id` (its name holds the
    nonce of the run's opening, unknown to the test: ``cursor_key``), or None."""
    before, _, after = (cursor_key(stream, group, run_id, "\0") or "").partition("\0")
    found = [k for k in keys if k.startswith(before) and k.endswith(after)
             and re.fullmatch(r"[0-9a-f]{8}", k[len(before):len(k) - len(after)])]
    assert len(found) <= 1, found
    return found[0] if found else None


def split_keys(client: Redis) -> list[bytes]:
    """Every key a split left: cursors and the parts' lists of ranges taken."""
    return sorted(client.scan_iter(match="*:recovery-split:*", count=10_000))


# kind -> (delivery count before the run, idle ms, owner): the kinds an interleaved backlog
# mixes (``seed_interleaved``); max_deliveries must be 5, min_idle_ms at most 10 min.
MIXED: dict[str, tuple[int, int, str]] = {
    "ok": (1, HOUR_MS, DEAD),          # handled and acked
    "poison": (9, HOUR_MS, DEAD),      # over the limit: dead-lettered, never handed over
    "fail": (1, HOUR_MS, DEAD),        # the handler fails it: stays pending on a job consumer
    "deleted": (1, HOUR_MS, DEAD),     # deleted upstream before the run
    "fresh": (1, 0, LIVE),             # a live consumer's, idle too little: left alone
    "waiting": (3, 200_000, DEAD),     # backoff factor 2 from 1 min: due after 4 min
}


def seed_interleaved(client: Redis, stream: str, kinds: Sequence[str],
                     group: str = GROUP) -> dict[Key, str]:
    """One entry per item of `kinds` (a kind of MIXED each), in that order, stuck as its
    kind says: (stream, group, id) -> kind. The kinds interleave in the PEL, so each part
    of a split unit meets every kind."""
    create_group(client, stream, group)
    ids = add_entries(client, stream, len(kinds), lambda i: binary_fields(i, kinds[i]))
    assert deliver(client, stream, group, DEAD, len(ids)) == ids
    by_kind: dict[str, list[str]] = {}
    for entry_id, kind in zip(ids, kinds, strict=True):
        by_kind.setdefault(kind, []).append(entry_id)
    for kind, mine in by_kind.items():
        deliveries, idle_ms, owner = MIXED[kind]
        make_stuck(client, stream, group, owner, mine, idle_ms, deliveries)
    if by_kind.get("deleted"):
        client.xdel(stream, *by_kind["deleted"])
    return {(stream, group, i): kind for i, kind in zip(ids, kinds, strict=True)}


def pattern(n: int, every: dict[str, int]) -> list[str]:
    """`n` kinds: entry i is the first kind of `every` whose number divides i + 1, else ok
    (``{"poison": 7}``: every 7th entry is poison)."""
    return [next((k for k, m in every.items() if (i + 1) % m == 0), "ok") for i in range(n)]
