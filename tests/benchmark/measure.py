"""What the benchmark measures besides wall time: Redis server counters and process memory.

- Redis CPU: INFO ``used_cpu_sys + used_cpu_user`` (seconds) before and after a run.
- Commands: INFO ``total_commands_processed`` (counts commands run inside Lua scripts and
  MULTI too) and the per-command ``cmdstat_*`` calls and usec.
- Round trips, server side: INFO ``total_reads_processed``, one per read event on a client
  socket. A pipeline counts once unless its request is bigger than Redis' 16 KB read buffer,
  so it slightly over-counts big pipelines; the loops also count their round trips exactly.
- Client CPU: user + sys seconds of this process' finished children (RUSAGE_CHILDREN) for
  the loops (one process each); for the job, the sum over every process of its tree as last
  polled (``PeakRss.cpu_s``): PySpark's Python workers are not reaped by anyone whose
  RUSAGE_CHILDREN reaches this process, so that figure missed their CPU (until 2026-11-25).
  Less sensitive to a busy machine than wall time.
- Memory: peak RSS (bytes) of a process tree, polled with psutil.
"""

from __future__ import annotations

import contextlib
import os
import resource
import statistics
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

import psutil
import redis

POLL_S = 0.05
TREE_EVERY = 10  # PeakRss lists the process tree anew every this many polls (0.5 s)
SETTLE_S = 0.2


@dataclass(frozen=True)
class RedisCounters:
    """One INFO snapshot: CPU seconds, commands, read events, per-command (calls, usec)."""

    cpu_s: float
    commands: int
    reads: int
    per_command: dict[str, tuple[int, int]]

    def __sub__(self, before: RedisCounters) -> RedisCounters:
        """What happened between two snapshots, without the snapshots' own INFO call (one
        command and one read event; its CPU, a few hundred us, stays in)."""
        names = (set(self.per_command) | set(before.per_command)) - {"info"}
        per_command = {}
        for name in names:
            calls, usec = self.per_command.get(name, (0, 0))
            calls0, usec0 = before.per_command.get(name, (0, 0))
            if calls - calls0:
                per_command[name] = (calls - calls0, usec - usec0)
        return RedisCounters(self.cpu_s - before.cpu_s, self.commands - before.commands - 1,
                             self.reads - before.reads - 1, per_command)


def redis_counters(client: redis.Redis) -> RedisCounters:
    """Snapshot the server's counters (one INFO call; it counts itself as one command)."""
    info = client.info("all")
    return RedisCounters(
        cpu_s=_cpu_s(info),
        commands=int(info["total_commands_processed"]),
        reads=int(info["total_reads_processed"]),
        per_command=_per_command(info),
    )


class BackgroundPoller:
    """Runs ``poll_once()`` every ``interval_s`` seconds in a daemon thread while the
    ``with`` block runs; subclasses keep what they measure."""

    interval_s: float = 0.5

    def __init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _poll(self) -> None:
        while not self._stop.is_set() and self.poll_once():
            self._stop.wait(self.interval_s)

    def poll_once(self) -> bool:
        """Take one measurement; False stops polling."""
        raise NotImplementedError


@dataclass(frozen=True)
class Sample:
    """Redis counters at one moment (``time.time()`` seconds): CPU s, per-command totals."""

    at: float
    cpu_s: float
    per_command: dict[str, tuple[int, int]]


class RedisSampler(BackgroundPoller):
    """Polls INFO cpu and commandstats every `interval_s` seconds on its own connection while
    a contender runs, so Redis' work can be laid over the contender's timeline. ``calls`` is
    the number of INFO calls it made (to take out of the run's command and read counts)."""

    def __init__(self, client: redis.Redis, interval_s: float = 0.5) -> None:
        super().__init__()
        self.client = client
        self.interval_s = interval_s
        self.samples: list[Sample] = []

    @property
    def calls(self) -> int:
        return len(self.samples)

    def poll_once(self) -> bool:
        info = self.client.info("cpu", "commandstats")
        self.samples.append(Sample(time.time(), _cpu_s(info), _per_command(info)))
        return True


def _cpu_s(info: dict[str, Any]) -> float:
    return float(info["used_cpu_sys"]) + float(info["used_cpu_user"])


def _per_command(info: dict[str, Any]) -> dict[str, tuple[int, int]]:
    return {key.removeprefix("cmdstat_"): (int(value["calls"]), int(value["usec"]))
            for key, value in info.items() if key.startswith("cmdstat_")}


def children_cpu_s() -> float:
    """User + sys CPU seconds of all finished, waited-for children of this process so far."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def idle_cpu_rate(client: redis.Redis, seconds: float = 1.0) -> float:
    """Redis CPU seconds per wall second while nobody talks to it (its cron jobs), measured
    over `seconds` after a short pause that lets the work of earlier commands settle."""
    time.sleep(SETTLE_S)
    before = redis_counters(client)
    time.sleep(seconds)
    return max(0.0, (redis_counters(client) - before).cpu_s / seconds)


@dataclass
class LastSeenCpu:
    """CPU seconds of processes or threads as last polled (an id's newer reading replaces its
    older one, so one that ended counts with its last reading), summed by kind."""

    seen: dict[int, tuple[str, float]] = field(default_factory=dict)  # id -> (kind, seconds)

    def record(self, ident: int, kind: str, seconds: float) -> None:
        self.seen[ident] = (kind, seconds)

    def by_kind(self) -> dict[str, float]:
        totals: dict[str, float] = {}
        for kind, seconds in self.seen.values():
            totals[kind] = totals.get(kind, 0.0) + seconds
        return totals


class PeakRss(BackgroundPoller):
    """Polls a process tree while it runs; keeps the peak RSS (bytes) of each role, and the
    CPU seconds (user + sys) of each process as last seen.

    `classify` names a process' role from its command line (None: not counted for RSS; a
    process keeps the last role it had, so one whose command line reads empty as it exits
    still counts its CPU under that role, not as ``other``). RSS
    is summed per role, and per combination of roles in `combos`, at each poll before taking
    the peak: ``peak["driver"]`` with ``combos={"driver": ("jvm", "driver_python")}`` is the
    largest total RSS the JVM and the driver's Python had at one moment.

    CPU is polled rather than read from ``RUSAGE_CHILDREN`` because that counts only
    descendants somebody waited for: PySpark's Python workers are forked by its daemon and
    never reaped by this process, so their CPU would be missing. Up to one poll interval
    (50 ms) of each process' last moments is missed.

    Listing the tree scans every process of the machine (~2 ms of this process' CPU), so it
    is listed anew only every ``TREE_EVERY`` polls; the polls between read only the processes
    already known. A process is counted from the first listing that finds it (CPU times are
    cumulative: nothing of it is lost unless it ends before that listing).

    ``series`` holds, per poll, its time (epoch s) and the CPU seconds per role so far: what
    ``tests.benchmark.timeline`` lays over the job's log lines.
    """

    def __init__(self, pid: int, classify: Callable[[list[str]], str | None],
                 combos: Mapping[str, tuple[str, ...]] | None = None) -> None:
        super().__init__()
        self.pid = pid
        self.classify = classify
        self.combos = dict(combos or {})
        self.peak: dict[str, int] = {}
        self._cpu = LastSeenCpu()  # by pid; kind: role, or "other"
        self.interval_s = POLL_S
        self._polls = 0
        self._processes: list[psutil.Process] = []
        self._roles: dict[int, str] = {}  # pid -> its last role (an exiting process has none)
        self.series: list[tuple[float, dict[str, float]]] = []  # (epoch s, CPU s per role)

    @property
    def cpu_s(self) -> dict[str, float]:
        """CPU seconds per role (``other`` for processes without one) and ``total``."""
        by_role = self._cpu.by_kind()
        return {**by_role, "total": sum(by_role.values())}

    def poll_once(self) -> bool:
        if self._polls % TREE_EVERY == 0:
            processes = _tree(self.pid)
            if processes is None:
                return False
            self._processes = processes
        self._polls += 1
        now = self._sample(self._processes)
        self.series.append((time.time(), self._cpu.by_kind()))
        for combo, roles in self.combos.items():
            now[combo] = sum(now.get(role, 0) for role in roles)
        for role, rss in now.items():
            self.peak[role] = max(self.peak.get(role, 0), rss)
        return True

    def _sample(self, processes: Iterable[psutil.Process]) -> dict[str, int]:
        totals: dict[str, int] = {}
        for proc in processes:
            try:
                role = self.classify(proc.cmdline()) or self._roles.get(proc.pid)
                with proc.oneshot():
                    times, rss = proc.cpu_times(), proc.memory_info().rss
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                continue
            self._cpu.record(proc.pid, role or "other", times.user + times.system)
            if role is not None:
                self._roles[proc.pid] = role
                totals[role] = totals.get(role, 0) + rss
        return totals


JVM_THREAD_KINDS = (("jit", "CompilerThre"), ("tasks", "Executor task"), ("gc", "GC Thread"),
                    ("gc", "G1 "))  # (kind, what its thread names start with or contain)


class JvmThreadCpu(BackgroundPoller):
    """Polls the CPU seconds (user + sys) of the JVM's threads in a process tree, by kind:
    ``jit`` (the C1/C2 compiler threads), ``tasks`` (Spark's executor task threads), ``gc``
    and ``other``. Each thread counts as last seen, so up to `interval_s` before the JVM's exit
    is missed. Linux only (/proc); elsewhere it stays empty."""

    def __init__(self, pid: int, interval_s: float = 0.5) -> None:
        super().__init__()
        self.pid = pid
        self.interval_s = interval_s
        self._threads = LastSeenCpu()  # by thread id
        self._tick = float(os.sysconf("SC_CLK_TCK"))

    @property
    def cpu_s(self) -> dict[str, float]:
        """CPU seconds per kind of thread, so far."""
        return self._threads.by_kind()

    def poll_once(self) -> bool:
        processes = _tree(self.pid)
        if processes is None:
            return False
        for proc in processes:
            with contextlib.suppress(psutil.Error):
                command = proc.cmdline()  # empty for a process that is exiting
                if command and Path(command[0]).name == "java":
                    self._read_threads(proc.pid)
        return True

    def _read_threads(self, pid: int) -> None:
        for task in Path(f"/proc/{pid}/task").glob("*"):
            try:
                name = (task / "comm").read_text().strip()
                fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue  # the thread ended meanwhile
            seconds = (int(fields[11]) + int(fields[12])) / self._tick  # utime, stime
            self._threads.record(int(task.name), _thread_kind(name), seconds)


def _thread_kind(name: str) -> str:
    return next((kind for kind, mark in JVM_THREAD_KINDS if mark in name), "other")


def _tree(pid: int) -> list[psutil.Process] | None:
    """The process `pid` and its descendants; None once it is gone."""
    try:
        root = psutil.Process(pid)
    except psutil.NoSuchProcess:
        return None
    return [root, *_children(root)]


def _children(root: psutil.Process) -> list[psutil.Process]:
    try:
        return root.children(recursive=True)
    except psutil.NoSuchProcess:
        return []


@dataclass
class Samples:
    """Repeated measurements of one number; the table shows the median."""

    values: list[float] = field(default_factory=list)

    def add(self, value: float | None) -> None:
        if value is not None:
            self.values.append(value)

    @property
    def median(self) -> float | None:
        return statistics.median(self.values) if self.values else None
