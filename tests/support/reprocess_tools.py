"""Support for the re-processing mode tests (requeue, reassign): stuck backlogs, the copies
a requeue made, consumers that stay live while a run works, runs whose tasks fail."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

from pyspark.sql import SparkSession
from redis import Redis

from recovery.testing.backlog import add_entries, create_group, deliver, make_stuck
from tests.support.backlogs import DEAD, HOUR_MS, binary_fields
from tests.support.fault_tools import GROUP, JobResult, run_in_process

SMALL_BATCHES = "spark.sql.execution.arrow.maxRecordsPerBatch"
LIVE = ("app-a", "app-b")  # the application's consumers in the reassign tests
WINDOW_MS = 2000  # reprocess.live_within_ms in those tests


def stuck(client: Redis, stream: str, kinds: dict[str, tuple[int, int]],
          groups: tuple[str, ...] = (GROUP,)) -> dict[tuple[str, str, str], str]:
    """Entries of each kind stuck an hour on a dead consumer, with this delivery count, in
    every group: (stream, group, id) -> kind."""
    seeded = {}
    for kind, (n, _) in kinds.items():
        ids = add_entries(client, stream, n, lambda i, k=kind: binary_fields(i, k))
        seeded.update({(stream, g, i): kind for g in groups for i in ids})
    for group in groups:
        create_group(client, stream, group)
        ids = deliver(client, stream, group, DEAD, 10_000)
        for kind, (_, deliveries) in kinds.items():
            mine = [k[2] for k, v in seeded.items() if v == kind and k[1] == group]
            make_stuck(client, stream, group, DEAD, mine, HOUR_MS, deliveries)
        assert len(ids) == sum(n for n, _ in kinds.values())
    return seeded


def copies(client: Redis, target: str, after: str = "-") -> dict[bytes, tuple[str, dict]]:
    """The copies in `target` after ID `after`: original checksum field -> (copy ID, fields)."""
    start = after if after == "-" else "(" + after
    found: dict[bytes, tuple[str, dict]] = {}
    for copy_id, fields in client.xrange(target, start):
        key = fields[b"n"] + b"/" + fields[b"kind"]
        assert key not in found, f"two copies of one entry: {key!r}"
        found[key] = (copy_id.decode(), fields)
    return found


def seen_now(client: Redis, stream: str, consumer: str) -> str:
    """`consumer` reads one new entry: a successful interaction (XINFO CONSUMERS idle and
    inactive both restart). The entry stays pending on it, too fresh to be claimed; its ID."""
    add_entries(client, stream, 1, lambda i: {b"kind": b"fresh", b"n": b"%d" % i})
    [entry_id] = deliver(client, stream, GROUP, consumer, 1)
    return entry_id


@contextlib.contextmanager
def kept_alive(client: Redis, streams: list[str], consumers: tuple[str, ...]
               ) -> Iterator[None]:
    """`consumers` keep reading (every 0.2 s) while the job runs: live however long it takes.
    Each acks what it read, as an application does: entries left pending would turn idle
    enough to claim and grow the PEL under the job's claim loop as fast as it claims."""
    stop = threading.Event()

    def poll() -> None:
        while not stop.wait(0.2):
            for stream in streams:
                for consumer in consumers:
                    client.xack(stream, GROUP, seen_now(client, stream, consumer))

    thread = threading.Thread(target=poll, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(5)


def run_with_small_batches(spark: SparkSession, argv: list[str]) -> JobResult:
    """The job in-process with Arrow batches of 20 rows: many hand-over steps to fail
    between (fault injection counts steps)."""
    spark.conf.set(SMALL_BATCHES, "20")
    try:
        return run_in_process(spark, argv)
    finally:
        spark.conf.unset(SMALL_BATCHES)
