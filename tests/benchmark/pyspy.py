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
import subprocess
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import psutil

RATE_HZ = 50
WAIT_FOR_PYTHON_S = 120.0
FRAME = re.compile(r"^(?P<function>[^ ]+) \((?P<file>[^:]+)(?::\d+)?\)$")
TOP = 25


def _python_parent(root: psutil.Process) -> psutil.Process | None:
    """The JVM of `root`'s tree once it has started a Python child (the driver's Python).
    Only a JVM: the spark-submit script itself runs a short-lived Python to find Spark."""
    for proc in [root, *root.children(recursive=True)]:
        try:
            if proc.name() == "java" and any(c.name().startswith("python")
                                             for c in proc.children()):
                return proc
        except psutil.NoSuchProcess:
            continue
    return None


def attach(root_pid: int, py_spy: str, output: Path) -> subprocess.Popen[bytes] | None:
    """Start py-spy on the process of `root_pid`'s tree that launches the Python processes
    (spark-submit: the JVM starts the driver's Python, then the workers), following its
    subprocesses. py-spy refuses a tree without Python, so wait until the driver's Python
    runs. None if it never does (the job died early)."""
    deadline = time.monotonic() + WAIT_FOR_PYTHON_S
    while time.monotonic() < deadline:
        try:
            parent = _python_parent(psutil.Process(root_pid))
        except psutil.NoSuchProcess:
            return None
        if parent is not None:
            with output.with_suffix(".log").open("wb") as log:
                return subprocess.Popen(
                    [py_spy, "record", "--pid", str(parent.pid), "--subprocesses", "--rate",
                     str(RATE_HZ), "--format", "raw", "--output", str(output), "--nonblocking"],
                    stdout=log, stderr=subprocess.STDOUT)
        time.sleep(0.1)
    return None


@dataclass(frozen=True)
class Profile:
    """Samples in total and per function (``function (dir/file)``)."""

    samples: int
    inclusive: Counter[str]
    leaf: Counter[str]


def _process_name(frame: str) -> str:
    """``process <pid>:"<command line>"`` -> the role of the process."""
    program = frame.partition(':"')[2].split(" ", 1)[0]
    if program.endswith("java"):
        return "[process: jvm]"
    if "recover.py" in frame:
        return "[process: driver python]"
    if "pyspark.daemon" in frame or "pyspark.worker" in frame:
        return "[process: python worker]"
    return "[process: other]"


def _frame_name(frame: str) -> str:
    if frame.startswith("process "):
        return _process_name(frame)
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
    """A JSON-friendly summary: total samples; the `n` biggest inclusive counts of the job's
    own functions (``recovery/``) and of processes; the `n` biggest leaf counts."""
    own = Counter({name: count for name, count in profile.inclusive.items()
                   if "(recovery/" in name or name.startswith("[process: python")
                   or name.startswith("[process: driver")})
    return {"samples": profile.samples, "inclusive": own.most_common(n),
            "leaf": profile.leaf.most_common(n)}
