"""A handler for the per-key order tests (tests/integration/test_order.py), imported on executors as
``tests.support.order_handler:in_order``. Steered by the control file of
``tests.support.fault_tools.write_control`` (``url``: where to record).

Per call it records, for each message, its ID on the list ``SEEN + <key>`` (every hand-over)
and, where it succeeds, on ``DONE + <key>``; a call holding two entries of one key is a
violation (``VIOLATIONS``); the Spark partition of each key (``PARTITIONS``). It fails the
messages whose IDs are in the set ``FAIL`` and rejects (``Result.dead_letter``) those in
``REJECT``; the key is the message's ``k`` field (``-`` without one). With ``delay_s`` in the
control file it sleeps that long per call first; ``COUNT`` counts the successes.
"""

from __future__ import annotations

import time
from collections import Counter

from recovery.handlers import Message, Result
from tests.support.handlers import _client, _control

SEEN = "test:order:seen:"
DONE = "test:order:done:"
VIOLATIONS = "test:order:violations"
PARTITIONS = "test:order:partitions"  # hash: key -> the partition ids that handled it
FAIL = "test:order:fail"
REJECT = "test:order:reject"
COUNT = "test:order:count"  # successes, all keys


def key_of(m: Message) -> str:
    return (m.field(b"k") or b"-").decode()


def in_order(messages: list[Message]) -> list[Result]:
    from pyspark import TaskContext

    ctx = TaskContext.get()
    partition = ctx.partitionId() if ctx is not None else -1
    control = _control()
    client = _client(control["url"])
    time.sleep(control.get("delay_s", 0))
    fail = {v.decode() for v in client.smembers(FAIL)}
    reject = {v.decode() for v in client.smembers(REJECT)}
    keys = Counter(key_of(m) for m in messages if m.field(b"k") is not None)
    pipe = client.pipeline(transaction=False)
    for key, n in keys.items():
        if n > 1:
            pipe.rpush(VIOLATIONS, f"{key} x{n} in one call")
    results = []
    for m in messages:
        key = key_of(m)
        pipe.rpush(SEEN + key, m.id)
        pipe.hset(PARTITIONS, key, partition)
        if m.id in fail:
            results.append(Result.failure(f"refused {m.id}"))
        elif m.id in reject:
            results.append(Result.dead_letter(f"rejected {m.id}"))
        else:
            pipe.rpush(DONE + key, m.id)
            results.append(Result.success())
    pipe.incrby(COUNT, sum(1 for r in results if r.ok))
    pipe.execute()
    return results
