"""Seed dead letters for measuring ``jobs/dead_letters.py`` (README, "Performance").

    .venv/bin/python -m tests.benchmark.dead_letters_seed --url redis://127.0.0.1:6379/0 \
        --streams 100 --per-stream 10000

Each source stream ``bench:<i>`` gets one entry and a dead-letter stream ``{bench:<i>}:dlq``
of `per-stream` entries in the layout ``recovery/redis_io/lua/dead_letter.lua`` writes
(original fields, then the x- metadata block), XADDed in pipelines of 1000: two reasons, five
error messages whose numbers vary (so five signatures, one null).
"""

from __future__ import annotations

import argparse
import time

import redis

CHUNK = 1000
MESSAGES = ["timeout after {n} ms on order {m}", "refused {ms}-{m}",
            "bad currency 'X{m}' for order {n}", "lost connection to 10.0.{m}.{n}:6379", ""]


def dead_letter_fields(stream: str, i: int, now_ms: int) -> dict[str, str]:
    """One dead letter's fields in dead_letter.lua's order."""
    message = MESSAGES[i % len(MESSAGES)].format(n=i * 7 % 5000, m=i % 97, ms=now_ms - i)
    fields = {"order": str(i), "payload": f"{i:064d}",
              "x-original-stream": stream, "x-original-group": f"g{i % 2}",
              "x-original-id": f"{now_ms - 10_000_000 + i}-0", "x-delivery-count": "6",
              "x-delivery-limit": "5", "x-idle-ms": "600000",
              "x-death-reason": "handler-failed-at-limit" if message else
              "max-deliveries-exceeded",
              "x-death-time": str(now_ms - (i % 3600) * 1000), "x-run-id": "bench-run",
              "x-original-consumer": "worker-1"}
    if message:
        fields["x-exception-message"] = message
    return fields


def seed(client: redis.Redis, streams: int, per_stream: int) -> int:
    """Seed and return how many dead letters were added."""
    now_ms = int(time.time() * 1000)
    added = 0
    for s in range(streams):
        source = f"bench:{s}"
        client.xadd(source, {"n": "0"})
        for start in range(0, per_stream, CHUNK):
            pipe = client.pipeline(transaction=False)
            for i in range(start, min(per_stream, start + CHUNK)):
                pipe.xadd(f"{{{source}}}:dlq", dead_letter_fields(source, i, now_ms))
            added += len(pipe.execute())
    return added


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--url", required=True)
    parser.add_argument("--streams", type=int, default=100)
    parser.add_argument("--per-stream", type=int, default=10_000)
    args = parser.parse_args()
    started = time.monotonic()
    n = seed(redis.Redis.from_url(args.url), args.streams, args.per_stream)
    print(f"seeded {n} dead letters in {time.monotonic() - started:.1f} s")


if __name__ == "__main__":
    main()
