"""Helpers of tests/unit/redis_io/test_journal.py: a handler whose behaviour changes between task
attempts, steered by fields of the entries (it runs on executors), and a seeded stream.

``scripted`` records each hand-over as ``tests.support.handlers.recording`` does (same
control file, same HANDLED hash), then, per message carrying one of these fields:

- ``fail_once``: fails the first time it is handed over anywhere, succeeds afterwards;
- ``hang_once``: the first time, the call sleeps ``hang_s`` (control file) first;
- ``ack``: XACKs, as a live consumer would, the entry of the same stream and group whose ID
  is the field's value, before answering.

It also adds each calling task's attempt number to the set ATTEMPTS (``attempts``).
"""

from __future__ import annotations

import time
from collections.abc import Mapping

from redis import Redis

from recovery.handlers import Message, Result
from recovery.testing.backlog import create_group, deliver, make_stuck
from tests.support.backlogs import DEAD, HOUR_MS
from tests.support.handlers import CHECKSUM, _client, _control, checksum, entry_key, recording

FAIL_ONCE, HANG_ONCE, ACK = b"fail_once", b"hang_once", b"ack"
SEEN_ONCE = "test:seen-once"  # hash: "<field> <entry>" -> 1 once that entry's first call came
ATTEMPTS = "test:attempts"  # set: the task attempt numbers that called the handler


def scripted(messages: list[Message]) -> object:
    """The recording handler, with the per-entry behaviours of the module docstring."""
    from pyspark import TaskContext

    control = _control()
    client = _client(control["url"])
    context = TaskContext.get()
    client.sadd(ATTEMPTS, context.attemptNumber() if context else -1)
    if any(m.field(HANG_ONCE) is not None and _first(client, HANG_ONCE, m) for m in messages):
        time.sleep(control.get("hang_s", 3))
    results = recording(messages)
    if not isinstance(results, list):
        return results
    for m in messages:
        target = m.field(ACK)
        if target is not None:
            client.xack(m.stream, m.group, target)
    return [Result.failure(f"fails once: {m.id}")
            if m.field(FAIL_ONCE) is not None and _first(client, FAIL_ONCE, m) else r
            for m, r in zip(messages, results, strict=True)]


def _first(client: Redis, what: bytes, m: Message) -> bool:
    """True the first time `m` comes with `what` (anywhere, in any attempt)."""
    return bool(client.hsetnx(SEEN_ONCE, f"{what.decode()} {entry_key(m.stream, m.group, m.id)}",
                              1))


def entry_id(i: int) -> str:
    """The ID ``seed_stream`` gives its entry i."""
    return f"{i + 1}-0"


def seed_stream(client: Redis, stream: str, group: str, n: int,
                extra: Mapping[int, Mapping[bytes, bytes]] = {},
                deliveries: Mapping[int, int] = {},
                owner: str = DEAD, idle_ms: int = HOUR_MS) -> list[str]:
    """`n` entries, entry i with ID ``entry_id(i)``, each pending on `owner`, idle
    `idle_ms`, delivered once unless `deliveries` (entry index -> count) says otherwise;
    entry i carries `extra[i]` as well as ``n`` and a checksum. Their IDs, in order."""
    create_group(client, stream, group)
    pipe = client.pipeline(transaction=False)
    for i in range(n):
        own = {b"n": str(i).encode(), **extra.get(i, {})}
        pipe.xadd(stream, {**own, CHECKSUM: checksum(list(own.items()))},  # type: ignore[arg-type]
                  id=entry_id(i))
    ids = [one.decode() for one in pipe.execute()]
    assert deliver(client, stream, group, owner, n) == ids
    by_count: dict[int, list[str]] = {}
    for i, one in enumerate(ids):
        by_count.setdefault(deliveries.get(i, 1), []).append(one)
    for count, chunk in by_count.items():
        make_stuck(client, stream, group, owner, chunk, idle_ms, count)
    return ids


def attempts(client: Redis) -> set[int]:
    """The task attempt numbers that called ``scripted``."""
    return {int(a) for a in client.smembers(ATTEMPTS)}
