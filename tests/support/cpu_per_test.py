"""A pytest plugin: the CPU seconds each test costs, for finding where ``make test`` spends
its time (issue 62: the suite is CPU-bound on 2 cores)::

    RECOVERY_TEST_CPU=/tmp/cpu .venv/bin/python -m pytest -p tests.support.cpu_per_test \\
        -n 4 --dist loadgroup

Each pytest process appends ``<node id> TAB <wall s> TAB <CPU s>`` per test (setup, call and
teardown) to ``$RECOVERY_TEST_CPU.<worker>``. The CPU is that of the process's tree from
/proc: its own, its live descendants' (the worker's Spark JVM, spark-submit processes,
servers, Python workers) and what exited children left in their parents' counts, so a
process started by one test and still running is charged to whichever test it burns in.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from typing import IO

import pytest

TICKS_PER_S = os.sysconf("SC_CLK_TCK")
_out: list[IO[str]] = []


def tree_cpu_s(root: int) -> float:
    """CPU seconds (user + system, with reaped children's) of `root` and its descendants."""
    children: dict[int, list[int]] = {}
    cpu: dict[int, float] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                stat = f.read()
        except OSError:
            continue  # exited meanwhile
        fields = stat[stat.rindex(")") + 2:].split()
        children.setdefault(int(fields[1]), []).append(int(name))
        cpu[int(name)] = sum(int(x) for x in fields[11:15]) / TICKS_PER_S
    total, todo = 0.0, [root]
    while todo:
        pid = todo.pop()
        total += cpu.get(pid, 0.0)
        todo.extend(children.get(pid, ()))
    return total


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Iterator[None]:
    """Time `item`'s setup, call and teardown; write its line when RECOVERY_TEST_CPU is set."""
    where = os.environ.get("RECOVERY_TEST_CPU")
    if not where:
        yield
        return
    if not _out:
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        _out.append(open(f"{where}.{worker}", "a"))  # noqa: SIM115 (open for the session)
    cpu, wall = tree_cpu_s(os.getpid()), time.monotonic()
    yield
    _out[0].write(f"{item.nodeid}\t{time.monotonic() - wall:.2f}\t"
                  f"{tree_cpu_s(os.getpid()) - cpu:.2f}\n")
    _out[0].flush()
