"""The job contender: ``spark-submit --master local[2] jobs/recover.py`` on a seeded backlog.

Writes a TOML config for the backlog, runs spark-submit with the no-op handler (or the slow
one of ``tests.benchmark.handlers``, its delay in the environment and ``spark.executorEnv``,
so it reaches Python workers on executors of their own too), polls the
process tree's memory and Redis' counters, and reads the JSON summary (last stdout line) and
the logs (``tests.benchmark.spark_log``) to split the wall time into session start, ``run()``
and exit, and into segments between the job's log lines (``tests.benchmark.timeline``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis

from tests.benchmark import pyspy, spark_log, timeline
from tests.benchmark.handlers import DELAY_ENV, handler_env, handler_path
from tests.benchmark.measure import JvmThreadCpu, PeakRss, RedisSampler
from tests.benchmark.seed import BacklogSpec

ROOT = Path(__file__).resolve().parents[2]
SPARK_SUBMIT = ROOT / ".venv" / "bin" / "spark-submit"
VENV_PYTHON = ROOT / ".venv" / "bin" / "python"
DRIVER = {"driver": ("jvm", "driver_python")}
JAVA_OPTIONS = "spark.driver.extraJavaOptions"
EXECUTOR_CLASS = "org.apache.spark.executor.CoarseGrainedExecutorBackend"


@dataclass(frozen=True)
class JobOptions:
    """How to submit: the master, extra ``--set`` overrides and ``--conf`` Spark settings;
    `py_spy`: path of a py-spy binary to profile the Python processes with (slows them);
    `code_root`: a directory with ``recovery/`` and ``jobs/`` to run instead of the working
    tree (a pristine export of one commit); `handler_delay_ms`: per message, the slow
    handler's delay (0: the no-op handler; the loops take it too)."""

    master: str = "local[2]"
    overrides: tuple[str, ...] = ()
    spark_conf: tuple[str, ...] = ()
    py_spy: str | None = None
    code_root: Path | None = None
    handler_delay_ms: float = 0.0


@dataclass
class JobRun:
    """One spark-submit: wall seconds, exit code, the JSON summary, phases (s), peak RSS per
    role (bytes), the job's log lines, Spark's actions and Python task times (ms), the
    CPU seconds of the JVM's threads by kind, its largest heap in use after a collection
    (bytes), and the CPU seconds of the process tree per role."""

    wall_s: float
    exit_code: int
    summary: dict[str, Any]
    phases: dict[str, float] = field(default_factory=dict)
    peak_rss: dict[str, int] = field(default_factory=dict)
    log: list[spark_log.LogLine] = field(default_factory=list)
    actions: list[spark_log.SparkAction] = field(default_factory=list)
    python_tasks_ms: dict[str, int] = field(default_factory=dict)
    profile: dict[str, object] = field(default_factory=dict)
    segments: list[timeline.Segment] = field(default_factory=list)
    sampler_calls: int = 0  # INFO calls made to sample Redis during the run
    jvm_threads_cpu_s: dict[str, float] = field(default_factory=dict)  # by kind (JvmThreadCpu)
    heap_after_gc_bytes: int | None = None  # the JVM's largest heap in use after a collection
    cpu_s: dict[str, float] = field(default_factory=dict)  # per role and "total" (PeakRss)


def config_text(spec: BacklogSpec, url: str, report_dir: Path, handler_delay_ms: float = 0.0
                ) -> str:
    """The TOML config of a benchmark run: the seeded streams, the handler for
    `handler_delay_ms` (the no-op one for 0)."""
    return "\n".join([
        "[redis]", f'url = "{url}"',
        "[streams]", f'match = "{spec.match}"',
        "[claim]", f"min_idle_ms = {spec.min_idle_ms}", f"max_deliveries = {spec.max_deliveries}",
        "[dead_letter]", 'suffix = ":dlq"',
        "[handler]", f'path = "{handler_path(handler_delay_ms)}"',
        "[report]", f'path = "{report_dir}"',
        "",
    ])


def python_path(code_root: Path | None) -> str:
    """PYTHONPATH for contenders: `code_root` first (its ``recovery`` wins over the editable
    install of the working tree), then the repository (for ``tests.benchmark``)."""
    parts = [str(code_root) if code_root else "", str(ROOT), os.environ.get("PYTHONPATH", "")]
    return os.pathsep.join(p for p in parts if p)


def submit_command(config: Path, options: JobOptions, gc_log: Path | None = None) -> list[str]:
    """The exact spark-submit command line; with `gc_log`, the driver JVM logs its
    collections there (added to any ``spark.driver.extraJavaOptions`` of `options`)."""
    command = [str(SPARK_SUBMIT), "--master", options.master]
    confs = dict(conf.split("=", 1) for conf in options.spark_conf)
    if options.handler_delay_ms > 0:  # executor JVMs apart from the driver's: local-cluster
        confs[f"spark.executorEnv.{DELAY_ENV}"] = f"{options.handler_delay_ms:g}"
    if gc_log is not None:
        java = confs.get(JAVA_OPTIONS, "")
        confs[JAVA_OPTIONS] = f"{java} -Xlog:gc:file={gc_log}".strip()
    for key, value in confs.items():
        command += ["--conf", f"{key}={value}"]
    script = (options.code_root or ROOT) / "jobs" / "recover.py"
    command += [str(script), "--config", str(config), "--log-level", "INFO"]
    for override in options.overrides:
        command += ["--set", override]
    return command


def driver_role(cmdline: list[str]) -> str | None:
    """Role of a process in the spark-submit tree: the driver JVM (in local mode also the
    executor), an executor JVM of its own (``--master local-cluster[...]``), the driver's
    Python (jobs/recover.py), or a Python worker."""
    if not cmdline:
        return None
    program = Path(cmdline[0]).name
    if program == "java":
        return "executor_jvm" if EXECUTOR_CLASS in cmdline else "jvm"
    if program.startswith("python"):
        if any(arg.endswith("recover.py") for arg in cmdline):
            return "driver_python"
        return "python_workers"
    return None


def run_job(spec: BacklogSpec, url: str, workdir: Path, options: JobOptions) -> JobRun:
    """Submit the job against `url`, wait for it, and measure it."""
    workdir.mkdir(parents=True, exist_ok=True)
    config = workdir / "bench.toml"
    config.write_text(config_text(spec, url, workdir / "reports", options.handler_delay_ms))
    env = {**handler_env(os.environ, options.handler_delay_ms),
           "PYTHONPATH": python_path(options.code_root),
           "PYSPARK_PYTHON": str(VENV_PYTHON if VENV_PYTHON.exists() else sys.executable)}
    stdout, stderr = workdir / "stdout.txt", workdir / "stderr.txt"
    stacks, gc_log = workdir / "py-spy.txt", workdir / "gc.log"
    with stdout.open("wb") as out, stderr.open("wb") as err:
        started_epoch, started = time.time(), time.perf_counter()
        # cwd: `python -m pyspark.daemon` puts it first on the workers' sys.path, so it must
        # not hold a `recovery` package other than the one chosen (and Spark's files go there)
        process = subprocess.Popen(submit_command(config, options, gc_log), cwd=workdir, env=env,
                                   stdout=out, stderr=err)
        with PeakRss(process.pid, driver_role, DRIVER) as rss, \
                JvmThreadCpu(process.pid) as jvm_threads, \
                RedisSampler(redis.Redis.from_url(url)) as sampler:
            spy = pyspy.attach(process.pid, options.py_spy, stacks) if options.py_spy else None
            code = process.wait()
        wall = time.perf_counter() - started
    if spy is not None:
        spy.wait(timeout=60)  # it writes its output once the JVM is gone
    summary = _summary(stdout)
    text = stdout.read_text(errors="replace") + stderr.read_text(errors="replace")
    lines = spark_log.job_lines(text, started_epoch)
    profiled = options.py_spy and stacks.exists()
    profile = pyspy.top(pyspy.summarise(stacks.read_text())) if profiled else {}
    cut = timeline.segments(lines, started_epoch, wall, sampler.samples, rss.series)
    return JobRun(wall, code, summary, spark_log.phases(lines, summary.get("duration_s"), wall),
                  rss.peak, lines, spark_log.spark_actions(text), spark_log.python_task_ms(text),
                  profile, cut,
                  sampler.calls, jvm_threads.cpu_s,
                  spark_log.heap_after_gc_peak(gc_log.read_text()) if gc_log.exists() else None,
                  rss.cpu_s)


def _summary(stdout: Path) -> dict[str, Any]:
    """The job's last stdout line (its JSON summary); {} when there is none."""
    lines = [line for line in stdout.read_text(errors="replace").splitlines() if line.strip()]
    try:
        return dict(json.loads(lines[-1])) if lines else {}
    except json.JSONDecodeError:
        return {}
