"""The two single-process contenders: the naive tutorial loop and the best redis-py loop.

Both recover every stream of a :class:`BacklogSpec` as the job does: claim idle entries with an
XAUTOCLAIM cursor loop, read delivery counts, dead-letter entries delivered more than
``max_deliveries`` times, hand the rest to the handler and ack them. The handler is
``recovery.handlers.noop``, or the slow one of ``tests.benchmark.handlers`` when
``BENCH_HANDLER_DELAY_MS`` is set (the job's handler, with the same delay per message).

Run one in its own process (clean memory and import costs)::

    python -m tests.benchmark.loops raw '<BacklogSpec as JSON>' redis://127.0.0.1:6379/0

It prints one JSON line: the loop's seconds and CPU seconds, round trips counted on the
client, what it did, and ``ru_maxrss`` in bytes.
"""

from __future__ import annotations

import json
import resource
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from functools import partial
from importlib import resources
from typing import Any

import redis

from recovery.handlers import Message, noop
from recovery.schemas import CARRIED_DELIVERIES
from tests.benchmark.handlers import Handler, from_environment
from tests.benchmark.seed import BacklogSpec

try:
    from recovery.redis_io.dlq_names import dead_letter_key
except ImportError:  # `run --code REF` of a commit from before the packages (recovery/*.py)
    from recovery.dlq_names import dead_letter_key  # type: ignore[no-redef]

DLQ_SUFFIX = ":dlq"
NAIVE_COUNT = 100
RAW_COUNT = 5000
DLQ_BATCH = 200
NAIVE_CONSUMER = "naive-recovery"
RAW_CONSUMER = "raw-recovery"
END = b"0-0"
REQUEUE_LOOP = "raw-requeue"
RAW_RUN_ID = "raw-loop"
# In dead_letter.lua from before one call could carry several units (`run --code REF`).
LEGACY_LAYOUT = "ARGV[6]: source name"
# In dead_letter.lua since it checks its target: ARGV[4] says whether to read the newest entry.
NEWEST_FLAG = "ARGV[4]: '1' to"
# In dead_letter.lua since reprocess.delete_acked: ARGV[5] says whether to ack with XACKDEL.
DELETE_FLAG = "ARGV[5]: '1'"
# In dead_letter.lua since a unit may hold keys (per-key order): a flag after the unit's count.
HOLD_FLAG = "'1' if it holds keys"


class CountingConnection(redis.Connection):
    """A connection that counts what it sends: one send per command or per pipeline, so
    ``sent`` is the number of round trips (this process only; the loops are one thread)."""

    sent = 0

    def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        CountingConnection.sent += 1
        super().send_packed_command(command, check_health)


def counting_client(url: str, protocol: int = 3) -> redis.Redis:
    """A client whose round trips are counted in ``CountingConnection.sent``."""
    pool = redis.ConnectionPool.from_url(url, connection_class=CountingConnection,
                                         protocol=protocol)
    return redis.Redis(connection_pool=pool)


@dataclass
class Tally:
    """What a loop did, entry by entry, counted from the replies of Redis."""

    claimed: int = 0
    acked: int = 0
    dead_lettered: int = 0
    seconds: float = 0.0
    cpu_s: float = 0.0  # user + sys of this process during the loop
    round_trips: int = 0
    maxrss_bytes: int = 0


# --- the naive loop, as many tutorials show it --------------------------------------------

def naive_recover(client: redis.Redis, spec: BacklogSpec, handle: Handler = noop) -> Tally:
    """XAUTOCLAIM COUNT 100; per claimed entry one XPENDING, then XADD + XACK or `handle`
    and XACK."""
    tally = Tally()
    for stream in spec.stream_names():
        dlq = dead_letter_key(stream, DLQ_SUFFIX)
        cursor: Any = "0-0"
        while True:
            cursor, entries, *_ = client.xautoclaim(stream, spec.group, NAIVE_CONSUMER,
                                                    spec.min_idle_ms, cursor, count=NAIVE_COUNT)
            for entry_id, fields in entries:
                tally.claimed += 1
                _naive_one(client, spec, stream, dlq, entry_id, fields, tally, handle)
            if cursor == END:
                break
    return tally


def _naive_one(client: redis.Redis, spec: BacklogSpec, stream: str, dlq: str,
               entry_id: bytes, fields: dict[bytes, bytes], tally: Tally,
               handle: Handler) -> None:
    info = client.xpending_range(stream, spec.group, entry_id, entry_id, 1)
    deliveries = int(info[0]["times_delivered"])
    if deliveries > spec.max_deliveries:
        client.xadd(dlq, {**fields, "x-original-stream": stream,  # type: ignore[dict-item]
                          "x-original-group": spec.group, "x-original-id": entry_id,
                          "x-delivery-count": deliveries})
        tally.dead_lettered += client.xack(stream, spec.group, entry_id)
        return
    message = Message(stream, spec.group, entry_id.decode(), list(fields.items()), deliveries)
    if handle([message])[0]:
        tally.acked += client.xack(stream, spec.group, entry_id)


# --- the best single-process loop -----------------------------------------------------------

@dataclass(frozen=True)
class MoveScript:
    """The job's dead-letter script (dead_letter.lua) as loaded: one call per stream's batch
    of dead letters (one unit per call, as the job on a Redis Cluster)."""

    sha: str
    legacy: bool = False  # the one-unit layout of older commits (`run --code REF`)
    newest_flag: bool = True  # ARGV[4], the target check's newest-entry switch (newer commits)
    delete_flag: bool = False  # ARGV[5], XACKDEL instead of XACK (newer commits)
    hold_flag: bool = True  # the unit's holds-keys switch after its count (newer commits)

    def command(self, spec: BacklogSpec, stream: str, values: list[Any]) -> tuple[Any, ...]:
        """The EVALSHA that moves `values` (6 per entry) of `stream` to its DLQ."""
        now_ms = int(time.time() * 1000)
        if self.legacy:
            head = [spec.group, RAW_CONSUMER, RAW_RUN_ID, spec.max_deliveries, now_ms, stream]
        else:
            flag = ["0"] * (self.newest_flag + self.delete_flag)
            head = [RAW_RUN_ID, spec.max_deliveries, now_ms, *flag, spec.group, RAW_CONSUMER,
                    stream, len(values) // 6, *(["0"] if self.hold_flag else [])]
        return ("EVALSHA", self.sha, 2, stream, dead_letter_key(stream, DLQ_SUFFIX), *head,
                *values)

    def moved(self, reply: list[Any]) -> int:
        """How many entries one call's reply says it moved."""
        entries = reply if self.legacy else reply[0]
        return sum(1 for r in entries if isinstance(r, bytes))


@dataclass
class Writes:
    """Acks and dead-letter moves of one claimed batch, sent with the next round trip."""

    acks: dict[str, list[bytes]] = field(default_factory=dict)
    moves: list[tuple[str, list[Any]]] = field(default_factory=list)  # (stream, 6 per entry)
    copies: list[tuple[str, list[Any]]] = field(default_factory=list)  # (stream, XADD fields)

    def queue(self, pipe: Any, spec: BacklogSpec, script: MoveScript) -> list[str]:
        """Queue everything on `pipe`; returns the kind of each queued reply, in order."""
        kinds = []
        for stream, fields in self.copies:
            pipe.execute_command("XADD", stream, "*", *fields)
            kinds.append("copy")
        for stream, ids in self.acks.items():
            pipe.execute_command("XACK", stream, spec.group, *ids)
            kinds.append("ack")
        for stream, values in self.moves:
            pipe.execute_command(*script.command(spec, stream, values))
            kinds.append("move")
        return kinds


def raw_recover(client: redis.Redis, spec: BacklogSpec, count: int = RAW_COUNT,
                requeue: bool = False, handle: Handler = noop) -> Tally:
    """One round trip per claimed batch, one MULTI/EXEC: [the previous batch's XACK and
    dead-letter script calls, XPENDING IDLE of the range about to be claimed (last owner, idle
    ms, delivery count before the claim), XAUTOCLAIM COUNT `count`]. With `requeue`, each
    entry the handler would get is instead XADDed back to its stream (its fields plus
    ``x-recovery-deliveries``) in the same MULTI as its XACK: the least Redis work a requeue
    can cost, without the job's ownership check. Else `handle` gets each batch to ack."""
    source = _dead_letter_source()
    script = MoveScript(client.script_load(source), LEGACY_LAYOUT in source,
                        NEWEST_FLAG in source, DELETE_FLAG in source, HOLD_FLAG in source)
    tally, writes = Tally(), Writes()
    for stream in spec.stream_names():
        cursor = b"0-0"
        while True:
            before, claim = _round_trip(client, spec, script, writes, tally, [
                ("XPENDING", stream, spec.group, "IDLE", spec.min_idle_ms, cursor, "+", count),
                ("XAUTOCLAIM", stream, spec.group, RAW_CONSUMER, spec.min_idle_ms, cursor,
                 "COUNT", count),
            ])
            writes = _route(spec, stream, claim[1], before, tally, requeue, handle)
            cursor = claim[0]
            if cursor == END:
                break
    _round_trip(client, spec, script, writes, tally, [])
    return tally


def _round_trip(client: redis.Redis, spec: BacklogSpec, script: MoveScript, writes: Writes,
                tally: Tally, commands: Sequence[tuple[Any, ...]]) -> list[Any]:
    """Send `writes` then `commands` in one MULTI/EXEC pipeline; count the writes; return the
    replies of `commands`."""
    pipe = client.pipeline(transaction=True)
    kinds = writes.queue(pipe, spec, script)
    for command in commands:
        pipe.execute_command(*command)
    replies = pipe.execute()
    for kind, reply in zip(kinds, replies, strict=False):
        if kind == "ack":
            tally.acked += int(reply)
        elif kind == "move":
            tally.dead_lettered += script.moved(reply)
    return replies[len(kinds):]


def _route(spec: BacklogSpec, stream: str, entries: list[Any], before: list[Any],
           tally: Tally, requeue: bool = False, handle: Handler = noop) -> Writes:
    """Split one claimed batch: over the limit -> dead-letter script values (6 per entry, in
    calls of up to ``DLQ_BATCH`` entries); the rest -> `handle`, then ack. `before` holds
    the XPENDING rows read atomically before the claim ([id, owner, idle ms, count]); the
    claim added one delivery."""
    known = {row[0]: row for row in before}
    handled: list[tuple[bytes, Message]] = []
    move_values: list[Any] = []
    moves: list[tuple[str, list[Any]]] = []
    for entry_id, flat in entries:
        row = known.get(entry_id)
        if flat is None or row is None:
            continue  # deleted upstream, or outside the page read before (not in this run)
        tally.claimed += 1
        deliveries = int(row[3]) + 1
        if deliveries > spec.max_deliveries:
            move_values += [entry_id, deliveries, row[2], row[1], "max-deliveries-exceeded", ""]
            if len(move_values) >= 6 * DLQ_BATCH:
                moves.append((stream, move_values))
                move_values = []
        else:
            pairs = list(zip(flat[::2], flat[1::2], strict=True))
            handled.append((entry_id, Message(stream, spec.group, entry_id.decode(), pairs,
                                              deliveries)))
    if move_values:
        moves.append((stream, move_values))
    if requeue:
        copies = [(stream, [*(v for pair in m.fields for v in pair), CARRIED_DELIVERIES,
                            m.delivery_count]) for _, m in handled]
        return Writes({stream: [i for i, _ in handled]} if handled else {}, moves, copies)
    results = handle([m for _, m in handled])
    acks = [entry_id for (entry_id, _), ok in zip(handled, results, strict=True) if ok]
    return Writes({stream: acks} if acks else {}, moves)


def _dead_letter_source() -> str:
    """The job's own atomic dead-letter script (same Redis work per moved entry)."""
    try:
        lua = resources.files("recovery.redis_io").joinpath("lua")
    except ModuleNotFoundError:  # `run --code REF` of a commit from before the packages
        lua = resources.files("recovery").joinpath("lua")
    return lua.joinpath("dead_letter.lua").read_text("utf-8")


def raw_client(url: str) -> redis.Redis:
    """RESP2 with unparsed stream replies: the cheapest decoding redis-py offers."""
    client = counting_client(url, protocol=2)
    for command in ("XAUTOCLAIM", "XPENDING"):
        client.set_response_callback(command, lambda response, **_: response)
    return client


LOOPS: dict[str, tuple[Callable[[str], redis.Redis], Callable[..., Tally]]] = {
    "naive": (counting_client, naive_recover),
    "raw": (raw_client, raw_recover),
    REQUEUE_LOOP: (raw_client, partial(raw_recover, requeue=True)),
}


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def run_loop(name: str, spec: BacklogSpec, url: str) -> Tally:
    """Connect, run loop `name` over `spec` with the handler the environment chooses
    (:func:`tests.benchmark.handlers.from_environment`), time it (s) and count its round
    trips."""
    make_client, recover = LOOPS[name]
    handle = from_environment()
    client = make_client(url)
    client.ping()  # connect outside the timed part, as the job's start-up is timed apart
    CountingConnection.sent = 0
    started, cpu = time.perf_counter(), _cpu_s()
    tally = recover(client, spec, handle=handle)
    tally.seconds, tally.cpu_s = time.perf_counter() - started, _cpu_s() - cpu
    tally.round_trips = CountingConnection.sent
    tally.maxrss_bytes = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return tally


def main(argv: list[str] | None = None) -> int:
    name, spec_json, url = (argv if argv is not None else sys.argv[1:])[:3]
    tally = run_loop(name, BacklogSpec(**json.loads(spec_json)), url)
    print(json.dumps(asdict(tally)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
