"""Measure the dead-letter console against one dead-letter stream of a million letters
(README "Dead-letter console", docs/OPERATIONS.md).

    .venv/bin/python -m tests.benchmark.console [--letters 1000000] [--repeats 5]

Starts a throwaway Redis on a free port (nothing else is touched), seeds ``{bench}:dlq`` with
`letters` letters in the layout ``dead_letter.lua`` writes (pipelined XADD with explicit IDs,
one a millisecond, so a time window is an ID range), then times, best and median of
`repeats`: a page of 100 letters newest first, oldest first, in a one-minute time window, and
filtered by reason (a filter that looks inside letters); the overview's live read (lengths,
oldest letters, groups); the same page and overview through HTTP (Starlette's TestClient:
routing and templates included); and how long the background count of the whole stream takes
while pages stay answered. Prints a Markdown table; ``--json FILE`` writes the figures.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import redis

from recovery.console.browse import read_page
from recovery.console.letters import LetterFilter
from recovery.console.overview import overview
from recovery.console.serve import ServeOptions, console_state
from recovery.console.users import load_users
from recovery.settings.model import load_settings
from recovery.testing.backlog import create_group
from recovery.testing.local_redis import LocalServer, any_server_binary
from tests.benchmark.dead_letters_seed import dead_letter_fields

KEY, SOURCE = "{bench}:dlq", "bench"
BASE_MS = 1_700_000_000_000
CHUNK = 10_000
SHAPES = 9973  # distinct field sets (a prime: order, message and group vary independently)


def seed_letters(client: redis.Redis, letters: int) -> float:
    """XADD `letters` letters to KEY, IDs ``BASE_MS + i``-0, in pipelines of CHUNK commands
    written as RESP bytes on one connection (building redis-py's command objects for a
    million letters took longer than Redis took to add them). Returns seconds."""
    started = time.perf_counter()
    key = KEY.encode()
    # Every command but its ID, as RESP bytes, per field set: a letter is its ID plus one.
    tails = [_resp_args(_letter_args(i, letters)) for i in range(SHAPES)]
    heads = [b"*%d\r\n" % (3 + len(_letter_args(i, letters))) + _resp_args([b"XADD", key])
             for i in range(SHAPES)]
    conn = client.connection_pool.get_connection()
    try:
        for start in range(0, letters, CHUNK):
            stop = min(letters, start + CHUNK)
            chunk = []
            for i in range(start, stop):
                entry_id = b"%d-0" % (BASE_MS + i)
                chunk += (heads[i % SHAPES], b"$%d\r\n%s\r\n" % (len(entry_id), entry_id),
                          tails[i % SHAPES])
            conn.send_packed_command([b"".join(chunk)])
            for _ in range(start, stop):
                conn.read_response()
    finally:
        client.connection_pool.release(conn)
    return time.perf_counter() - started


def _letter_args(i: int, letters: int) -> list[bytes]:
    fields = dead_letter_fields(SOURCE, i, BASE_MS + letters)
    return [x.encode() for pair in fields.items() for x in pair]


def _resp_args(args: list[bytes]) -> bytes:
    """RESP bulk strings of `args` (without the array header)."""
    return b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args)


def timed(fn: Callable[[], object], repeats: int) -> tuple[float, float]:
    """(best, median) milliseconds of `repeats` calls."""
    runs = []
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        runs.append((time.perf_counter() - started) * 1000)
    return min(runs), statistics.median(runs)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--letters", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    flavor, binary = any_server_binary()
    with LocalServer(binary) as server:
        client = server.client()
        create_group(client, SOURCE, "g0")
        seed_s = seed_letters(server.client(), args.letters)
        settings = load_settings(None, [f"redis.url={server.url}", f"streams.keys={SOURCE}"])
        users = load_users({"RECOVERY_CONSOLE_TOKEN": "benchmark-token-1"})
        state = console_state(settings, users, ServeOptions())
        figures = measure(state, args.letters, args.repeats)
        state.close()
    figures = {"server": flavor, "letters": args.letters, "seed_s": round(seed_s, 2), **figures}
    print(table(figures))
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))
    return 0


def measure(state: object, letters: int, repeats: int) -> dict[str, object]:
    from starlette.testclient import TestClient

    from recovery.console.app import console_app

    c = state.conn.client  # type: ignore[attr-defined]
    mid = BASE_MS + letters // 2
    window = LetterFilter(since_ms=mid, until_ms=mid + 60_000)
    reason = LetterFilter(reason="max-deliveries-exceeded")  # every fifth letter
    rows: dict[str, object] = {
        "page 100 newest first": timed(lambda: read_page(c, KEY, LetterFilter(), None, True),
                                       repeats),
        "page 100 oldest first": timed(lambda: read_page(c, KEY, LetterFilter(), None, False),
                                       repeats),
        "page 100 in a 1-minute window": timed(lambda: read_page(c, KEY, window, None, True),
                                               repeats),
        "page 100 filtered by reason": timed(lambda: read_page(c, KEY, reason, None, True),
                                             repeats),
        "overview (live read)": timed(lambda: overview(state), repeats),  # type: ignore[arg-type]
    }
    http = TestClient(console_app(state))  # type: ignore[arg-type]
    login = http.get("/login").text
    token = login.split('name="csrf_token" value="')[1].split('"')[0]
    http.post("/login", data={"csrf_token": token, "user": "operator",
                              "secret": "benchmark-token-1"})
    rows["HTTP page of 100 (browse)"] = timed(lambda: http.get(f"/browse?key={KEY}"), repeats)
    rows["HTTP overview"] = timed(lambda: http.get("/"), repeats)
    scan = state.scans.latest(KEY)  # type: ignore[attr-defined]
    while scan is not None and scan.finished_s is None:
        time.sleep(0.2)
    rows["background count of the whole stream (s)"] = (
        round(scan.finished_s - scan.started_s, 1) if scan and scan.finished_s else None)
    return {k: ([round(x, 2) for x in v] if isinstance(v, tuple) else v)
            for k, v in rows.items()}


def table(figures: dict[str, object]) -> str:
    lines = [f"console on {figures['server']}, {figures['letters']:,} letters in one stream "
             f"(seeded in {figures['seed_s']} s)", "", "| what | best ms | median ms |",
             "|---|---:|---:|"]
    for name, value in figures.items():
        if isinstance(value, list):
            lines.append(f"| {name} | {value[0]} | {value[1]} |")
        elif name.startswith("background"):
            lines.append(f"| {name} | {value} | |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
