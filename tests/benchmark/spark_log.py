"""Reading a spark-submit run's logs: the job's own lines and Spark's job timings.

- The job logs through Python logging (``%(asctime)s %(levelname)s %(name)s: ...``); under
  spark-submit the driver's Python stderr reaches the JVM's stdout, so look in both streams.
- Spark (log4j, INFO) logs ``DAGScheduler: Job N finished: <call site>, took X ms`` per
  action and ``Times: total = X, boot = Y, init = Z, finish = W`` per Python task (ms).
- The JVM's collector (``-Xlog:gc``) logs ``GC(N) Pause ... <before>M-><after>M(<heap>M)``
  per collection: the heap in use before and after it, and the heap's committed size.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime

JOB_LINE = re.compile(
    r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) (\w+) (recovery[\w.]*): (.*)$", re.MULTILINE)
SPARK_JOB = re.compile(r"Job (\d+) finished: (.+?), took ([\d.]+) ms")
PYTHON_TASK = re.compile(r"Times: total = (-?\d+), boot = (-?\d+), init = (-?\d+), "
                         r"finish = (-?\d+)")
GC_PAUSE = re.compile(r"GC\(\d+\) Pause .*? (\d+)([KMG])->(\d+)([KMG])\((\d+)([KMG])\)")
UNIT_BYTES = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
LOG_TIME_FORMAT = "%Y-%m-%d %H:%M:%S,%f"


@dataclass(frozen=True)
class LogLine:
    """One line of the job's own log: seconds since the process started, logger, text."""

    at_s: float
    logger: str
    message: str


@dataclass(frozen=True)
class SparkAction:
    """One finished Spark job (an action): its id, call site and duration (ms)."""

    job: int
    call_site: str
    took_ms: float


def job_lines(log: str, started_epoch: float) -> list[LogLine]:
    """The job's own log lines, timed from `started_epoch` (s since the epoch, local clock)."""
    lines = []
    for stamp, _level, logger, message in JOB_LINE.findall(log):
        at = datetime.strptime(stamp, LOG_TIME_FORMAT).timestamp() - started_epoch
        lines.append(LogLine(round(at, 3), logger, message))
    return lines


def spark_actions(log: str) -> list[SparkAction]:
    """Every ``Job N finished ... took X ms`` line, in order."""
    return [SparkAction(int(job), site, float(ms)) for job, site, ms in SPARK_JOB.findall(log)]


def python_task_ms(log: str) -> dict[str, int]:
    """Sums over all Python tasks of total, boot, init and finish time (ms)."""
    sums = dict.fromkeys(("total", "boot", "init", "finish"), 0)
    for values in PYTHON_TASK.findall(log):
        for name, value in zip(sums, values, strict=True):
            sums[name] += int(value)
    return sums


def phases(lines: list[LogLine], duration_s: float | None, wall_s: float) -> dict[str, float]:
    """Session start, ``run()`` and exit seconds: ``run()`` ends at its summary line and lasts
    ``duration_s``; before it the JVM and SparkSession start, after it Spark stops."""
    summary = next((ln for ln in lines if ln.message.endswith(" summary")), None)
    if summary is None or duration_s is None:
        return {}
    return {"session_s": round(summary.at_s - duration_s, 3), "run_s": duration_s,
            "exit_s": round(wall_s - summary.at_s, 3)}


def heap_after_gc_peak(gc_log: str) -> int | None:
    """The largest heap in use right after a collection (bytes) in a ``-Xlog:gc`` log: what
    the JVM kept alive at its fullest moment, whatever garbage it made in between. None
    when the log has no collection."""
    peaks = [int(m.group(3)) * UNIT_BYTES[m.group(4)] for m in GC_PAUSE.finditer(gc_log)]
    return max(peaks, default=None)
