"""One measured run of one contender: fresh server, fresh seed, run, counters, verification.

Every contender runs in its own process (the loops through ``python -m
tests.benchmark.loops``, the job through spark-submit), so its wall time includes its own
start-up and its memory is its own. The Redis counters are read right before the process
starts and right after it exits.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from recovery.testing.local_redis import LocalServer, any_server_binary
from tests.benchmark.handlers import handler_env
from tests.benchmark.loops import LOOPS, REQUEUE_LOOP, Tally
from tests.benchmark.measure import children_cpu_s, idle_cpu_rate, redis_counters
from tests.benchmark.seed import BacklogSpec, seed_backlog
from tests.benchmark.spark_job import ROOT, JobOptions, python_path, run_job
from tests.benchmark.verify import verify_recovered

JOB = "job"
CONTENDERS = (*LOOPS, JOB)
SERVER_ARGS = ("--appendonly", "no")


class ContenderFailed(RuntimeError):
    """A contender exited non-zero or recovered something else than what was seeded."""


@dataclass
class RunRecord:
    """One run. Seconds, bytes, counts; `steady_s` is the loop's own timer (None for the job,
    whose steady part is its wall time minus the fixed cost measured by the probe runs)."""

    contender: str
    size: str
    messages: int
    repeat: int
    wall_s: float
    steady_s: float | None
    round_trips: int | None
    peak_rss_bytes: int
    client_cpu_s: float  # the contender's whole process tree, user + sys
    steady_client_cpu_s: float | None  # the loop's own CPU while it ran (None for the job)
    redis_cpu_s: float
    redis_idle_cpu_per_s: float
    redis_commands: int
    redis_reads: int
    per_command: dict[str, tuple[int, int]]
    acked: int
    dead_lettered: int
    seed_s: float
    load_avg_1m: float  # at the start of the run
    load_avg_1m_end: float
    details: dict[str, Any] = field(default_factory=dict)
    handler_delay_ms: float = 0.0  # per handled message; 0: the no-op handler, or none called


def run_loop_process(name: str, spec: BacklogSpec, url: str, code_root: Path | None = None,
                     handler_delay_ms: float = 0.0) -> tuple[float, Tally]:
    """Run loop `name` in a fresh interpreter (with `code_root`'s ``recovery`` if given, its
    handler `handler_delay_ms` ms per message); (wall seconds, what it reported)."""
    env = {**handler_env(os.environ, handler_delay_ms), "PYTHONPATH": python_path(code_root)}
    started = time.perf_counter()
    # with `-m` the cwd comes first on sys.path: it decides which `recovery` is imported
    done = subprocess.run([sys.executable, "-m", "tests.benchmark.loops", name,
                           json.dumps(asdict(spec)), url], cwd=code_root or ROOT, env=env,
                          capture_output=True, text=True, check=False)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise ContenderFailed(f"{name} loop exited {done.returncode}: {done.stderr[-2000:]}")
    return wall, Tally(**json.loads(done.stdout.strip().splitlines()[-1]))


@dataclass
class Measured:
    """What running one contender gave, before the counters and the verification."""

    wall_s: float
    steady_s: float | None
    round_trips: int | None
    peak_rss_bytes: int
    steady_cpu_s: float | None
    said_acked: int  # what the contender says it did, to compare with Redis
    said_dead_lettered: int
    details: dict[str, Any]
    own_redis_calls: int = 0  # commands (and reads) the harness sent meanwhile
    client_cpu_s: float | None = None  # the process tree's CPU, where polled (the job)


def _measure_job(spec: BacklogSpec, url: str, workdir: Path, options: JobOptions) -> Measured:
    job = run_job(spec, url, workdir, options)
    if job.exit_code != 0 or "totals" not in job.summary:
        raise ContenderFailed(f"spark-submit exited {job.exit_code}: see {workdir}")
    totals = job.summary["totals"]
    details = {"phases": job.phases, "peak_rss": job.peak_rss,
               "log": [asdict(line) for line in job.log],
               "actions": [asdict(a) for a in job.actions],
               "python_tasks_ms": job.python_tasks_ms, "totals": totals,
               "py_spy": job.profile, "segments": [asdict(s) for s in job.segments],
               "jvm_threads_cpu_s": job.jvm_threads_cpu_s,
               "heap_after_gc": {"jvm": job.heap_after_gc_bytes}, "cpu_s": job.cpu_s}
    return Measured(job.wall_s, None, None, job.peak_rss.get("driver", 0), None,
                    int(totals["reprocessed"]) + int(totals.get("requeued", 0)),
                    int(totals["dead_lettered"]), details,
                    job.sampler_calls, job.cpu_s.get("total"))


def _measure_loop(name: str, spec: BacklogSpec, url: str, options: JobOptions) -> Measured:
    wall, tally = run_loop_process(name, spec, url, options.code_root, options.handler_delay_ms)
    return Measured(wall, tally.seconds, tally.round_trips, tally.maxrss_bytes, tally.cpu_s,
                    tally.acked, tally.dead_lettered, {"claimed": tally.claimed})


def run_contender(name: str, spec: BacklogSpec, repeat: int, workdir: Path,
                  options: JobOptions, idle_probe_s: float = 1.0) -> RunRecord:
    """Seed `spec` into a fresh server, measure its idle CPU rate for `idle_probe_s`
    seconds, run contender `name` on it, measure, verify."""
    _flavor, binary = any_server_binary()
    with LocalServer(binary, args=SERVER_ARGS) as server:
        client = server.client(socket_timeout=300)  # seeding a big stream takes seconds
        seeded = seed_backlog(client, spec)
        idle = idle_cpu_rate(client, idle_probe_s)
        load = os.getloadavg()[0]
        before, cpu_before = redis_counters(client), children_cpu_s()
        if name == JOB:
            measured = _measure_job(spec, server.url, workdir, options)
        else:
            measured = _measure_loop(name, spec, server.url, options)
        delta, reaped_cpu = redis_counters(client) - before, children_cpu_s() - cpu_before
        load_end = os.getloadavg()[0]
        requeued = name == REQUEUE_LOOP or (
            name == JOB and "reprocess.mode=requeue" in options.overrides)
        outcome = verify_recovered(client, seeded, requeued)
    said = (measured.said_acked, measured.said_dead_lettered)
    if said != (outcome.acked, outcome.dead_lettered):
        raise ContenderFailed(f"{name} says it acked and dead-lettered {said}, Redis shows "
                              f"{(outcome.acked, outcome.dead_lettered)}")
    return RunRecord(
        contender=name, size=spec.label, messages=spec.messages, repeat=repeat,
        wall_s=measured.wall_s, steady_s=measured.steady_s, round_trips=measured.round_trips,
        peak_rss_bytes=measured.peak_rss_bytes,
        client_cpu_s=reaped_cpu if measured.client_cpu_s is None else measured.client_cpu_s,
        steady_client_cpu_s=measured.steady_cpu_s,
        redis_cpu_s=delta.cpu_s,
        redis_idle_cpu_per_s=idle,
        redis_commands=delta.commands - measured.own_redis_calls,
        redis_reads=delta.reads - measured.own_redis_calls,
        per_command=delta.per_command, acked=outcome.acked,
        dead_lettered=outcome.dead_lettered, seed_s=seeded.seconds, load_avg_1m=load,
        load_avg_1m_end=load_end, details={**measured.details, "reaped_cpu_s": reaped_cpu},
        handler_delay_ms=0.0 if requeued else options.handler_delay_ms)
