"""Laying Redis' work over the job's timeline: what each phase of a run costs Redis.

The job's own log lines (``spark_log.job_lines``; not the periodic progress lines) cut its
wall time into segments, each named after the line that ends it (the last one ends with the
process). Redis counters sampled every half second (``measure.RedisSampler``) are read at the
segment bounds: CPU interpolated linearly, per-command totals from the last sample before the
bound. The job's own processes' CPU per role (``measure.PeakRss.series``, polled every 50 ms:
the JVMs, the driver's Python, the Python workers) is read at the last poll before each bound.
"""

from __future__ import annotations

import bisect
import itertools
import re
from dataclasses import dataclass, field

from tests.benchmark.measure import Sample
from tests.benchmark.spark_log import LogLine

RUN_PREFIX = re.compile(r"^run \S+?:? ")
LABEL_CHARS = 60
TOP = 3
# The progress lines' logger; "recovery.progress" in commits from before the packages
# (`run --code REF`).
PROGRESS_LOGGERS = ("recovery.driver.progress", "recovery.progress")


@dataclass(frozen=True)
class Segment:
    """One stretch of a run: seconds since the process started, Redis CPU seconds in it, the
    commands that took most Redis time in it as (name, calls, usec), and the CPU seconds the
    job's processes took in it, per role (``spark_job.driver_role``)."""

    label: str
    start_s: float
    seconds: float
    redis_cpu_s: float
    top_commands: list[tuple[str, int, int]]
    job_cpu_s: dict[str, float] = field(default_factory=dict)  # role -> CPU s in the segment


def _label(message: str) -> str:
    return RUN_PREFIX.sub("", message)[:LABEL_CHARS]


def _cpu_at(samples: list[Sample], at: float) -> float:
    times = [s.at for s in samples]
    i = bisect.bisect_left(times, at)
    if i == 0:
        return samples[0].cpu_s
    if i == len(samples):
        return samples[-1].cpu_s
    before, after = samples[i - 1], samples[i]
    share = (at - before.at) / (after.at - before.at) if after.at > before.at else 0.0
    return before.cpu_s + share * (after.cpu_s - before.cpu_s)


def _commands_at(samples: list[Sample], at: float) -> dict[str, tuple[int, int]]:
    times = [s.at for s in samples]
    return samples[max(0, bisect.bisect_right(times, at) - 1)].per_command


def _top(start: dict[str, tuple[int, int]], end: dict[str, tuple[int, int]]
         ) -> list[tuple[str, int, int]]:
    delta = []
    for name, (calls, usec) in end.items():
        calls0, usec0 = start.get(name, (0, 0))
        if name != "info" and calls > calls0:
            delta.append((name, calls - calls0, usec - usec0))
    return sorted(delta, key=lambda d: -d[2])[:TOP]


def _roles_at(series: list[tuple[float, dict[str, float]]], at: float) -> dict[str, float]:
    """The CPU seconds per role as of the last poll at or before `at` (none before the first)."""
    i = bisect.bisect_right([t for t, _ in series], at)
    return series[i - 1][1] if i else {}


def _role_delta(start: dict[str, float], end: dict[str, float]) -> dict[str, float]:
    return {role: round(cpu - start.get(role, 0.0), 3) for role, cpu in sorted(end.items())}


def segments(lines: list[LogLine], started_epoch: float, wall_s: float,
             samples: list[Sample],
             roles: list[tuple[float, dict[str, float]]] | None = None) -> list[Segment]:
    """The run cut at each of the job's log lines, with Redis' share of each piece and, given
    `roles` (``measure.PeakRss.series``), the job's processes' CPU per role in it."""
    if len(samples) < 2:
        return []
    marks = [ln for ln in lines if ln.logger not in PROGRESS_LOGGERS]  # periodic, not phases
    bounds = [(0.0, "")] + [(ln.at_s, _label(ln.message)) for ln in marks]
    bounds.append((wall_s, "process exit"))
    result = []
    for (start, _), (end, label) in itertools.pairwise(bounds):
        t0, t1 = started_epoch + start, started_epoch + end
        result.append(Segment(
            label=label, start_s=round(start, 3), seconds=round(end - start, 3),
            redis_cpu_s=round(_cpu_at(samples, t1) - _cpu_at(samples, t0), 4),
            top_commands=_top(_commands_at(samples, t0), _commands_at(samples, t1)),
            job_cpu_s=_role_delta(_roles_at(roles, t0), _roles_at(roles, t1)) if roles else {}))
    return result
