"""Wall time of the operator commands on a 40-entry backlog, in this process's command
(``python -m recovery``, i.e. ``redis-stream-recovery``): in-process (the default without a
master, ``recovery.cli.in_process``) against spark-submit (``RECOVERY_SPARK_SUBMIT=1``),
run in turn, pair by pair, on one Redis.

    .venv/bin/python -m tests.benchmark.operator_commands --url redis://127.0.0.1:6391/0 \
        --rounds 3

Each round seeds the backlog anew (2 streams x 20 pending entries, idle an hour, 5 of each
stream delivered 9 times), then times ``dry-run``, ``apply`` (of a dry run made just before,
untimed), ``redrive`` (of the dead letters that apply made) and ``dead-letters``, each way.
Seeding and the untimed dry runs are outside the figures. Writes only the keys ``ops:*`` and
``{ops:*}:dlq`` of the database named, and the reports under a temporary directory.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import redis

from recovery.testing.backlog import add_entries, create_group, deliver, make_stuck

STREAMS = ("ops:a", "ops:b")
WAYS = {"in-process": {}, "spark-submit": {"RECOVERY_SPARK_SUBMIT": "1"}}


def seed(client: redis.Redis) -> None:
    """The 40-entry backlog, on fresh keys."""
    client.delete(*STREAMS, *[f"{{{s}}}:dlq" for s in STREAMS])
    for stream in STREAMS:
        ids = add_entries(client, stream, 20, lambda i: {"n": str(i)})
        create_group(client, stream, "g")
        deliver(client, stream, "g", "crashed", 20)
        make_stuck(client, stream, "g", "crashed", ids, idle_ms=3_600_000)
        make_stuck(client, stream, "g", "crashed", ids[:5], 3_600_000, delivery_count=9)


def command(args: list[str], env: dict[str, str]) -> tuple[float, dict]:
    """Run ``python -m recovery ARGS``; (wall s, its JSON line). Exits on a failure."""
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "recovery", *args], capture_output=True,
                          text=True, timeout=600, env={**os.environ, **env})
    wall = time.monotonic() - started
    print(f"{args[0]:14} {'spark-submit' if env else 'in-process':12} {wall:7.2f} s",
          flush=True)
    if done.returncode != 0:
        sys.exit(f"{args[0]} failed ({done.returncode}):\n{(done.stdout + done.stderr)[-2000:]}")
    return wall, json.loads(done.stdout.strip().splitlines()[-1])


def one_round(client: redis.Redis, base: list[str], times: dict[str, list[float]]) -> None:
    """Each command each way, in turn (A then B, B then A on odd rounds)."""
    ways = list(WAYS.items())
    if len(times.get("dry-run in-process", [])) % 2:
        ways.reverse()
    for name, env in ways:
        seed(client)
        times.setdefault(f"dry-run {name}", []).append(command(["dry-run", *base], env)[0])
        _, dry = command(["dry-run", *base], WAYS["in-process"])
        wall, applied = command(["apply", dry["report_path"], *base], env)
        assert applied["totals"]["dead_lettered"] == 10, applied
        times.setdefault(f"apply {name}", []).append(wall)
        wall, redriven = command(["redrive", *base], env)
        assert redriven["totals"]["redriven"] == 10, redriven
        times.setdefault(f"redrive {name}", []).append(wall)
        times.setdefault(f"dead-letters {name}", []).append(
            command(["dead-letters", *base], env)[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", required=True, help="a Redis database to write ops:* in")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    client = redis.Redis.from_url(args.url)
    times: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="operator-bench-") as reports:
        base = ["--set", f"redis.url={args.url}", "--set", f"streams.keys={','.join(STREAMS)}",
                "--set", f"report.path={Path(reports)}", "--set",
                "handler.path=recovery.handlers:example_handler"]
        for _ in range(args.rounds):
            one_round(client, base, times)
    client.delete(*STREAMS, *[f"{{{s}}}:dlq" for s in STREAMS])
    for key, walls in times.items():
        print(f"{key:28} median {statistics.median(walls):6.2f} s  "
              f"min {min(walls):6.2f}  max {max(walls):6.2f}  ({len(walls)} runs)")


if __name__ == "__main__":
    main()
