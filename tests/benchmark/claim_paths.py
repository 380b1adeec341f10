"""The claim paths Redis 8.4+ would allow, measured against the job's (docs/DESIGN.md, "What
newer servers would offer"): on a fresh server of `--flavor` (Redis 8.6: ``redis86``),
`--entries` entries stuck an hour on a dead consumer are claimed `--count` at a time by

- ``xautoclaim``: the job's step, ``MULTI XPENDING IDLE .. / XAUTOCLAIM .. COUNT n EXEC``,
  until the cursor is ``0-0``;
- ``xreadgroup-claim``: ``XREADGROUP GROUP g job COUNT n CLAIM min-idle STREAMS s >``
  until a reply is short.

Per path and repeat: round trips, and Redis CPU per entry from INFO commandstats (``usec`` of
EXEC and MULTI, whose usec holds the commands inside, or of XREADGROUP). Prints the minimum
and the median over `--repeats`: this machine's other work makes single figures noisy.

    .venv/bin/python -m tests.benchmark.claim_paths --flavor redis86 --repeats 7
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Callable

import redis

from tests.support.servers import start_server

MIN_IDLE_MS = 60_000
HOUR_MS = 3_600_000


def seed(client: redis.Redis, entries: int) -> None:
    """`entries` entries of ~100 bytes, delivered to ``dead`` and idle an hour; stats reset."""
    client.execute_command("FLUSHALL")
    pipe = client.pipeline(transaction=False)
    for i in range(entries):
        pipe.execute_command("XADD", "s", "*", "n", str(i), "payload", "x" * 100)
    pipe.execute()
    client.execute_command("XGROUP", "CREATE", "s", "g", "0")
    client.execute_command("XREADGROUP", "GROUP", "g", "dead", "COUNT", entries, "STREAMS", "s",
                           ">")
    ids = [entry_id for entry_id, _ in client.execute_command("XRANGE", "s", "-", "+")]
    for k in range(0, entries, 1000):
        client.execute_command("XCLAIM", "s", "g", "dead", 0, *ids[k:k + 1000], "IDLE",
                               HOUR_MS, "JUSTID")
    client.execute_command("CONFIG", "RESETSTAT")


def by_autoclaim(client: redis.Redis, count: int) -> tuple[int, int]:
    """The job's claim steps: (round trips, entries claimed)."""
    trips, claimed, cursor = 0, 0, "0-0"
    while True:
        pipe = client.pipeline(transaction=True)
        pipe.execute_command("XPENDING", "s", "g", "IDLE", MIN_IDLE_MS, cursor, "+", count)
        pipe.execute_command("XAUTOCLAIM", "s", "g", "job", MIN_IDLE_MS, cursor, "COUNT", count)
        _, reply = pipe.execute()
        trips += 1
        claimed += len(reply[1])
        cursor = reply[0].decode()
        if cursor == "0-0":
            return trips, claimed


def by_readgroup_claim(client: redis.Redis, count: int) -> tuple[int, int]:
    """XREADGROUP ... CLAIM until a short reply: (round trips, entries claimed)."""
    trips, claimed = 0, 0
    while True:
        reply = client.execute_command("XREADGROUP", "GROUP", "g", "job", "COUNT", count,
                                       "CLAIM", MIN_IDLE_MS, "STREAMS", "s", ">")
        trips += 1
        got = len(reply[0][1]) if reply else 0
        claimed += got
        if got < count:
            return trips, claimed


PATHS: dict[str, tuple[Callable[[redis.Redis, int], tuple[int, int]], tuple[str, ...]]] = {
    "xautoclaim": (by_autoclaim, ("exec", "multi")),
    "xreadgroup-claim": (by_readgroup_claim, ("xreadgroup",)),
}


def server_usec(client: redis.Redis, commands: tuple[str, ...]) -> int:
    """Microseconds the server spent in `commands` since the last CONFIG RESETSTAT."""
    stats = client.info("commandstats")
    return sum(int(stats[f"cmdstat_{c}"]["usec"]) for c in commands
               if f"cmdstat_{c}" in stats)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--flavor", default="redis86")
    parser.add_argument("--entries", type=int, default=10_000)
    parser.add_argument("--count", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    with start_server(args.flavor) as server:
        client = server.client()
        raw = redis.Redis(port=server.port, protocol=2)  # as the job's client speaks
        raw.response_callbacks.clear()  # raw replies, as the job reads them
        for name, (claim, commands) in PATHS.items():
            per_entry, trips = [], 0
            for _ in range(args.repeats):
                seed(raw, args.entries)
                trips, claimed = claim(raw, args.count)
                assert claimed == args.entries, (name, claimed)
                per_entry.append(server_usec(client, commands) / claimed)
            print(f"{name}: {args.entries} entries, COUNT {args.count}: {trips} round trips; "
                  f"Redis CPU per entry min {min(per_entry):.2f} us, "
                  f"median {statistics.median(per_entry):.2f} us ({args.repeats} repeats)")


if __name__ == "__main__":
    main()
