"""A handler for the split-unit tests (tests/unit/driver/test_split.py), imported on executors as
``tests.support.split_handler:recording_workers``: it records which worker process and which
Spark partition handed over each call's entries and, when the control file says ``watch``,
what Redis holds of the run meanwhile (the job consumers of the call's group, the split's
keys and their TTLs); then it answers as ``tests.support.handlers:recording`` does (which
records each entry's hand-overs in HANDLED), steered by the same control file
(``tests.support.fault_tools.write_control``)."""

from __future__ import annotations

import os

from recovery.handlers import Message
from tests.support.handlers import _client, _control, recording

WORKERS = "test:split:workers"  # hash: "<pid> <partition id>" -> entries handed over there
SEEN_CONSUMERS = "test:split:consumers"  # set: job consumers of the group seen during calls
SPLIT_TTLS = "test:split:ttls"  # hash: a split key seen during a call -> its PTTL then (ms)


def recording_workers(messages: list[Message]) -> object:
    """Record os.getpid() and the Spark partition of the call (and, asked to ``watch``, the
    run's consumers and split keys), then ``recording``."""
    from pyspark import TaskContext

    ctx = TaskContext.get()
    partition = ctx.partitionId() if ctx is not None else -1
    control = _control()
    client = _client(control["url"])
    client.hincrby(WORKERS, f"{os.getpid()} {partition}", len(messages))
    if control.get("watch") and messages:
        first = messages[0]
        names = [c["name"] for c in client.xinfo_consumers(first.stream, first.group)
                 if c["name"].startswith(b"recovery-")]
        if names:
            client.sadd(SEEN_CONSUMERS, *names)
        for key in client.scan_iter(match="*:recovery-split:*", count=1000):
            client.hset(SPLIT_TTLS, key, client.pttl(key))
    return recording(messages)
