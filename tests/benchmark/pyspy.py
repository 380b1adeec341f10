"""Optional profiling of the job's Python processes (driver and workers) with py-spy.

``py-spy record --subprocesses --format raw`` writes collapsed stacks: one line per distinct
stack, ``frame;frame;...;leaf count``, each frame ``function (file:line)``. The summary
counts samples per function, inclusive (anywhere on the stack) and by leaf, so a reader sees
which of the job's functions hold the time and which library calls do the work. py-spy
samples only running threads: time spent waiting for Redis, Spark or a lock is not counted.
With ``--subprocesses`` each stack starts with a ``process <pid>:"<command line>"`` frame.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

RATE_HZ = 50
FRAME = re.compile(r"^(?P<function>[^ ]+) \((?P<file>[^:]+)(?::\d+)?\)$")
TOP = 25


def wrap(command: list[str], py_spy: str, output: Path) -> list[str]:
    """`command` run under py-spy, following subprocesses, writing collapsed stacks."""
    return [py_spy, "record", "--subprocesses", "--rate", str(RATE_HZ), "--format", "raw",
            "--output", str(output), "--nonblocking", "--", *command]


@dataclass(frozen=True)
class Profile:
    """Samples in total and per function (``function (file)``), busy stacks only."""

    samples: int
    inclusive: Counter[str]
    leaf: Counter[str]


def _frame_name(frame: str) -> str:
    match = FRAME.match(frame.strip())
    if not match:
        return frame.strip()
    path = match["file"]
    short = "/".join(path.split("/")[-2:])
    return f"{match['function']} ({short})"


def summarise(collapsed: str) -> Profile:
    """Count samples per function, inclusive and as the leaf of the stack."""
    inclusive: Counter[str] = Counter()
    leaf: Counter[str] = Counter()
    total = 0
    for line in collapsed.splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        frames = [_frame_name(f) for f in stack.split(";") if f]
        if not frames:
            continue
        count = int(count_text)
        total += count
        leaf[frames[-1]] += count
        for name in set(frames):
            inclusive[name] += count
    return Profile(total, inclusive, leaf)


def top(profile: Profile, n: int = TOP) -> dict[str, object]:
    """A JSON-friendly summary: total samples, the `n` biggest inclusive and leaf counts."""
    return {"samples": profile.samples, "inclusive": profile.inclusive.most_common(n),
            "leaf": profile.leaf.most_common(n)}
