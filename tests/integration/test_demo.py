"""README's first command: ``make demo`` (jobs/demo.py) on its throwaway server. The demo
throws its server away, so the test reads what the demo itself read from Redis after each
round (dead letters per stream, copies read back, entries reassigned) and holds each round's
JSON summary against it."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_demo_runs_every_round_ok_and_redis_agrees() -> None:
    done = subprocess.run([sys.executable, str(ROOT / "jobs" / "demo.py")], cwd=ROOT,
                          capture_output=True, text=True, timeout=600,
                          stdin=subprocess.DEVNULL)  # no terminal: it does not wait for Enter
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-3000:]
    summaries = _summaries(done.stdout)
    assert [s["status"] for s in summaries] == ["ok", "ok", "ok"], out[-3000:]
    first, requeue, reassign = summaries
    assert first["skipped"] == [] and requeue["skipped"] == [] and reassign["skipped"] == []
    # Read from Redis by the demo after the first round: XLEN of each dead-letter stream.
    dead_letters = [int(n) for n in re.findall(r":dlq: (\d+) dead letters", out)]
    assert len(dead_letters) == 3 and sum(dead_letters) == first["totals"]["dead_lettered"] > 0
    # Read back with XREADGROUP by the demo's application: each requeued copy exactly once.
    copies = [int(n) for n in re.findall(r"(\d+) copies read and acked", out)]
    assert sum(copies) == requeue["totals"]["requeued"] > 0
    # The live consumer's own pending entries (XREADGROUP ... 0) hold every reassigned one.
    reassigned = [int(n) for n in re.findall(r"pending for worker-2-live, (\d+) of them", out)]
    assert sum(reassigned) == reassign["totals"]["reassigned"] > 0
    # It ends with the command that opens the console on its server.
    assert re.search(r"RECOVERY_CONSOLE_TOKEN=\S+ \S+redis-stream-recovery console --config "
                     r"\S+demo.toml --set redis.url=redis://127.0.0.1:\d+/0\n", done.stdout)


def _summaries(stdout: str) -> list[dict[str, Any]]:
    """The JSON summary lines the demo's three runs printed, in order."""
    return [json.loads(line) for line in stdout.splitlines()
            if line.startswith("{") and '"run_id"' in line]
