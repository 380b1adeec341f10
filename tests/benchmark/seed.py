"""Seeding the benchmark's stuck backlog: S streams x N entries, fast, with no sleeping.

One server-side script call per stream (``lua/seed_stuck.lua``) adds the entries (4 fields,
about 200 bytes), creates the group, delivers everything to a consumer that never acks, then
ages the entries with XCLAIM ... IDLE ms RETRYCOUNT n JUSTID (the trick of
``recovery.testing.backlog.make_stuck``). Calls are pipelined, so 1M entries seed in seconds.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from importlib import resources

import redis

from recovery.redis_io.streams import as_str

HOUR_MS = 3_600_000
STREAMS_PER_PIPELINE = 20
SLICE = 50_000  # entries per script call: ~0.2 s of Redis time, far below its busy limit
PAYLOAD_BYTES = 140  # with the other three fields: about 200 bytes per entry


@dataclass(frozen=True)
class BacklogSpec:
    """What to seed. Times in ms; `over_limit_fraction` of entries exceed `max_deliveries`."""

    streams: int
    per_stream: int
    group: str = "workers"
    consumer: str = "worker-crashed"
    idle_ms: int = HOUR_MS
    min_idle_ms: int = 60_000
    max_deliveries: int = 5
    over_limit_fraction: float = 0.05
    prefix: str = "bench:"
    # Of the entries not over the limit, about this fraction is delivered `not_due_deliveries`
    # times (run.py --not-due): not due under a steep enough backoff schedule.
    not_due_fraction: float = 0.0
    not_due_deliveries: int = 3
    # Ordering keys interleaved over the entries (field ``account``, run.py --keys); 0: none.
    keys: int = 0

    @property
    def messages(self) -> int:
        """Entries seeded in total."""
        return self.streams * self.per_stream

    @property
    def label(self) -> str:
        """``<streams>x<per stream>``, as given on the command line."""
        return f"{self.streams}x{self.per_stream}"

    @property
    def match(self) -> str:
        """A SCAN MATCH pattern that selects the seeded streams (and not their DLQs)."""
        return self.prefix + "*"

    def stream_names(self) -> list[str]:
        """The seeded stream keys, in seeding order."""
        width = len(str(self.streams))
        return [f"{self.prefix}{i:0{width}d}" for i in range(self.streams)]

    def over_limit_per_stream(self) -> int:
        """How many entries of each stream the seed puts over the delivery limit."""
        return int(self.per_stream * self.over_limit_fraction)


@dataclass(frozen=True)
class SeededBacklog:
    """What was seeded: the over-limit IDs per stream (they must end in the DLQ once), and
    the IDs delivered ``spec.not_due_deliveries`` times (not due: they must stay pending)."""

    spec: BacklogSpec
    over_limit: dict[str, list[str]]
    seconds: float
    not_due: dict[str, list[str]] = field(default_factory=dict)

    @property
    def not_due_total(self) -> int:
        """Entries seeded not due, all streams."""
        return sum(len(ids) for ids in self.not_due.values())


def parse_size(text: str) -> tuple[int, int]:
    """``"100x1000"`` -> (100 streams, 1000 entries per stream)."""
    streams, sep, per_stream = text.lower().partition("x")
    if not sep or not streams.isdigit() or not per_stream.isdigit():
        raise ValueError(f"size {text!r}: write it as <streams>x<entries per stream>")
    return int(streams), int(per_stream)


def _seed_script(client: redis.Redis) -> redis.commands.core.Script:
    source = resources.files("tests.benchmark").joinpath("lua", "seed_stuck.lua")
    return client.register_script(source.read_text("utf-8"))


def seed_backlog(client: redis.Redis, spec: BacklogSpec) -> SeededBacklog:
    """Seed `spec` into an empty server; returns the over-limit IDs and the seconds it took.

    Ordinary entries get delivery count 1, over-limit ones ``max_deliveries + 3``: after one
    more claim the first are within the limit, the second are over it, whoever claims. With
    ``spec.not_due_fraction``, that share of the ordinary ones gets ``not_due_deliveries``.
    """
    script = _seed_script(client)
    started = time.perf_counter()
    over_limit: dict[str, list[str]] = {}
    not_due: dict[str, list[str]] = {}
    for calls in _batched(_seed_calls(spec), STREAMS_PER_PIPELINE):
        pipe = client.pipeline(transaction=False)
        for name, first, size in calls:
            script(keys=[name], client=pipe, args=[
                spec.group, spec.consumer, size, spec.idle_ms, 1, spec.max_deliveries + 3,
                spec.over_limit_fraction, "p" * PAYLOAD_BYTES, first, spec.not_due_fraction,
                spec.not_due_deliveries, spec.keys])
        for (name, _, _), (over, later) in zip(calls, pipe.execute(), strict=True):
            over_limit.setdefault(name, []).extend(as_str(i) for i in over)
            not_due.setdefault(name, []).extend(as_str(i) for i in later)
    return SeededBacklog(spec, over_limit, time.perf_counter() - started, not_due)


def _seed_calls(spec: BacklogSpec) -> list[tuple[str, int, int]]:
    """(stream, number of the slice's first entry, slice size): streams of more than
    ``SLICE`` entries are seeded in slices, in order."""
    return [(name, first, min(SLICE, spec.per_stream - first + 1))
            for name in spec.stream_names()
            for first in range(1, spec.per_stream + 1, SLICE)]


def _batched(items: list[tuple[str, int, int]], size: int) -> list[list[tuple[str, int, int]]]:
    return [items[i : i + size] for i in range(0, len(items), size)]
