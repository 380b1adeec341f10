"""Turning run records into the benchmark's tables (markdown, printed and written to a file).

Medians over repeats. Per contender and size:

- wall: end to end, process start to exit (s); msg/s = messages / median wall;
- fixed / steady (s): loops: the interpreter start-up vs the loop's own timer; the job: the
  wall time of spark-submit on a near-empty backlog (the probe run right after each job run)
  vs the rest: steady = median over repeats of (job wall - its probe's wall);
- client CPU per message (us): user + sys time of the contender's whole process tree (for
  the job: JVM, driver Python, workers; with --py-spy also py-spy), the cost that a busy
  machine distorts least; "steady": the loop's own CPU while it ran, or the job's minus
  its probe's;
- Redis CPU per message (us): INFO used_cpu_sys + used_cpu_user delta, net of the server's
  idle rate (its cron, measured on the seeded server just before the run) over the wall time;
- commands per message (server: INFO total_commands_processed, counts commands inside Lua
  scripts and MULTI), read events per message (server: total_reads_processed, about one per
  round trip), round trips per message counted in the loops' own client;
- driver peak RSS (MB): loops: ru_maxrss; the job: the largest sum of the driver JVM (in
  local mode also the executor; an executor JVM of its own, ``local-cluster``, is shown
  apart) and the driver's Python, polled every 50 ms.

Per contender measured at two sizes or more, the marginal rate between consecutive sizes: the
extra messages of the larger over the smaller divided by the extra median wall time (msg/s),
and the fixed cost that leaves (s). For the job it counts as fixed whatever both sizes pay
alike, such as the part of the JVM's warm-up (the JIT compiling the Arrow reader and the
Parquet writer) that the smaller size already completes; it still counts the extra units'
own work (more streams: discovery, health, housekeeping).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from itertools import pairwise

from tests.benchmark.contenders import JOB, RunRecord
from tests.benchmark.measure import Samples

PROBE = "job-startup"


def is_job(name: str) -> bool:
    """A job contender: ``job`` (the first master), ``job@<master>`` (any further one),
    ``job+<variant>`` or ``job+<variant>@<master>`` (run with a ``--variant``'s settings)."""
    return name == JOB or name.startswith((JOB + "@", JOB + "+"))


def probe_of(job: str) -> str:
    """The probe runs' label of a job contender (``job-startup``, ``job-startup@<master>``,
    ``job-startup+<variant>``)."""
    return PROBE + job[len(JOB):]


def is_probe(name: str) -> bool:
    return name == PROBE or name.startswith((PROBE + "@", PROBE + "+"))
MB = 1 << 20
TOP_COMMANDS = 8


@dataclass
class Row:
    """One line of the main table (medians); None where a number does not apply."""

    contender: str
    size: str
    messages: int
    runs: int
    wall_s: float
    fixed_s: float | None
    steady_s: float | None
    cpu_us_per_msg: float | None
    commands_per_msg: float | None
    reads_per_msg: float | None
    round_trips_per_msg: float | None
    peak_rss_mb: float | None
    client_cpu_us_per_msg: float | None = None
    steady_client_cpu_us_per_msg: float | None = None
    note: str = ""
    extras: dict[str, float | None] = field(default_factory=dict)
    handler_delay_ms: float = 0.0  # per message (0: the no-op handler, or none called)

    @property
    def msg_per_s(self) -> float:
        return self.messages / self.wall_s

    @property
    def steady_msg_per_s(self) -> float | None:
        return self.messages / self.steady_s if self.steady_s else None


def median_of(records: Iterable[RunRecord], value: Callable[[RunRecord], float | None]
            ) -> float | None:
    samples = Samples()
    for record in records:
        samples.add(value(record))
    return samples.median


def _detail(section: str, name: str) -> Callable[[RunRecord], float | None]:
    """Reads ``record.details[section][name]`` (the job's phases, its RSS per role)."""

    def read(record: RunRecord) -> float | None:
        value = record.details.get(section, {}).get(name)
        return None if value is None else float(value)

    return read


def _per_msg(records: list[RunRecord], value: Callable[[RunRecord], float | None],
             scale: float = 1.0) -> float | None:
    median = median_of(records, value)
    return None if median is None else median * scale / records[0].messages


def _minus_probe(probes: list[RunRecord] | None, value: Callable[[RunRecord], float]
                 ) -> Callable[[RunRecord], float | None]:
    """`value` of a job run minus that of the probe run of the same repeat; None where that
    is not positive (the backlog's own share is below the noise of the fixed start-up)."""
    by_repeat = {p.repeat: value(p) for p in probes or []}

    def steady(record: RunRecord) -> float | None:
        probe = by_repeat.get(record.repeat)
        rest = None if probe is None else value(record) - probe
        return rest if rest is not None and rest > 0 else None

    return steady


def _steady(records: list[RunRecord], probes: list[RunRecord] | None
            ) -> tuple[float | None, float | None, float | None]:
    """(fixed s, steady s, steady client CPU s): loops time and measure themselves; the job
    is paired with its probes."""
    if is_job(records[0].contender):
        return (median_of(probes or [], lambda r: r.wall_s),
                median_of(records, _minus_probe(probes, lambda r: r.wall_s)),
                median_of(records, _minus_probe(probes, lambda r: r.client_cpu_s)))
    return (median_of(records, lambda r: r.wall_s - (r.steady_s or 0.0)),
            median_of(records, lambda r: r.steady_s),
            median_of(records, lambda r: r.steady_client_cpu_s))


def make_row(records: list[RunRecord], probes: list[RunRecord] | None = None) -> Row:
    """Medians of one contender at one size; `probes`: the job's probe runs (fixed cost),
    paired with the job's runs by repeat."""
    first = records[0]
    fixed, steady, steady_cpu = _steady(records, probes)
    phases = {name: median_of(records, _detail("phases", name))
              for name in ("session_s", "run_s", "exit_s")} if is_job(first.contender) else {}
    if is_job(first.contender):
        phases["heap_after_gc_bytes"] = median_of(records, _detail("heap_after_gc", "jvm"))
    return Row(
        contender=first.contender, size=first.size, messages=first.messages,
        runs=len(records), wall_s=median_of(records, lambda r: r.wall_s) or 0.0,
        fixed_s=fixed, steady_s=steady,
        cpu_us_per_msg=_per_msg(records, _net_cpu_s, 1e6),
        commands_per_msg=_per_msg(records, lambda r: r.redis_commands),
        reads_per_msg=_per_msg(records, lambda r: r.redis_reads),
        round_trips_per_msg=_per_msg(records, lambda r: r.round_trips),
        peak_rss_mb=(median_of(records, lambda r: r.peak_rss_bytes) or 0) / MB,
        client_cpu_us_per_msg=_per_msg(records, lambda r: r.client_cpu_s, 1e6),
        steady_client_cpu_us_per_msg=None if steady_cpu is None
        else steady_cpu * 1e6 / first.messages,
        extras=phases, handler_delay_ms=first.handler_delay_ms,
    )


def _net_cpu_s(record: RunRecord) -> float:
    """Redis CPU seconds of a run without what the idle server would have used meanwhile."""
    return record.redis_cpu_s - record.redis_idle_cpu_per_s * record.wall_s


def extrapolate(row: Row, size: str, messages: int) -> Row:
    """`row`'s per-message rates applied to a bigger backlog it was not run on."""
    rate = row.steady_msg_per_s or row.msg_per_s
    steady = messages / rate
    return Row(
        contender=row.contender, size=size, messages=messages, runs=0,
        wall_s=steady + (row.fixed_s or 0.0), fixed_s=row.fixed_s, steady_s=steady,
        cpu_us_per_msg=row.cpu_us_per_msg, commands_per_msg=row.commands_per_msg,
        reads_per_msg=row.reads_per_msg, round_trips_per_msg=row.round_trips_per_msg,
        peak_rss_mb=None, client_cpu_us_per_msg=row.client_cpu_us_per_msg,
        steady_client_cpu_us_per_msg=row.steady_client_cpu_us_per_msg,
        note=f"extrapolated from {row.size}", handler_delay_ms=row.handler_delay_ms,
    )


def build_rows(records: list[RunRecord]) -> list[Row]:
    """One Row per (contender, size) measured, job rows using the probes of the same size."""
    groups: dict[tuple[str, str], list[RunRecord]] = defaultdict(list)
    for record in records:
        groups[(record.contender, record.size)].append(record)
    rows = []
    for (contender, size), group in groups.items():
        if is_probe(contender):
            continue
        rows.append(make_row(group, groups.get((probe_of(contender), size))))
    return rows


@dataclass(frozen=True)
class Marginal:
    """A contender's cost of more messages, from one measured size to the next larger one:
    `msg_per_s`, extra messages / extra median wall time; `fixed_s`, the smaller size's
    median wall minus its messages at that rate. None where the wall did not grow."""

    contender: str
    small: str
    large: str
    msg_per_s: float | None
    fixed_s: float | None


def marginals(rows: list[Row]) -> list[Marginal]:
    """Per contender measured (not extrapolated) at two sizes or more, one Marginal per pair
    of consecutive sizes, smallest first."""
    measured: dict[str, dict[int, Row]] = defaultdict(dict)
    for row in rows:
        if row.runs:
            measured[row.contender][row.messages] = row
    out = []
    for contender, by_size in measured.items():
        sized = [by_size[n] for n in sorted(by_size)]
        for small, large in pairwise(sized):
            extra_s = large.wall_s - small.wall_s
            rate = (large.messages - small.messages) / extra_s if extra_s > 0 else None
            fixed = small.wall_s - small.messages / rate if rate else None
            out.append(Marginal(contender, small.size, large.size, rate, fixed))
    return out


MARGINAL_HEADER = ("contender", "from", "to", "marginal msg/s", "fixed s (implied)",
                   "job / this, marginal msg/s")


def marginal_table(rows: list[Row]) -> list[list[str]]:
    """The marginal rates, and the job's as a ratio of each contender's over the same sizes."""
    found = marginals(rows)
    job = {(m.small, m.large): m.msg_per_s for m in found if m.contender == JOB}
    return [[m.contender, m.small, m.large, fmt(m.msg_per_s, 0), fmt(m.fixed_s),
             fmt(ratio(job.get((m.small, m.large)), m.msg_per_s), 2)] for m in found]


def fmt(value: float | None, digits: int = 1) -> str:
    if value is None:
        return "-"
    return f"{value:,.{digits}f}"


MAIN_HEADER = ("contender", "size", "runs", "msg/s (end to end)", "wall s", "fixed start-up s",
               "steady s", "steady msg/s", "client CPU us/msg: all / steady",
               "Redis CPU us/msg",
               "Redis cmds/msg",
               "Redis reads/msg", "client round trips/msg", "driver peak RSS MB",
               "handler delay ms/msg")


def main_table(rows: list[Row]) -> list[list[str]]:
    """The main table: one line per contender and size."""
    lines = []
    for row in rows:
        name = row.contender + (f" ({row.note})" if row.note else "")
        lines.append([name, row.size, str(row.runs), fmt(row.msg_per_s, 0), fmt(row.wall_s),
                      fmt(row.fixed_s), fmt(row.steady_s, 2), fmt(row.steady_msg_per_s, 0),
                      fmt(row.client_cpu_us_per_msg, 1) + " / "
                      + fmt(row.steady_client_cpu_us_per_msg, 1), fmt(row.cpu_us_per_msg, 2),
                      fmt(row.commands_per_msg, 2), fmt(row.reads_per_msg, 4),
                      fmt(row.round_trips_per_msg, 4), fmt(row.peak_rss_mb, 0),
                      f"{row.handler_delay_ms:g}"])
    return lines


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


RATIO_HEADER = ("size", "versus", "end-to-end msg/s", "steady msg/s",
                "steady client CPU per msg",
                "Redis CPU per msg", "Redis cmds per msg")


def ratio_table(rows: list[Row]) -> list[list[str]]:
    """job/raw and job/naive per size (msg/s: above 1 means the job is faster)."""
    by_key = {(r.contender, r.size): r for r in rows}
    lines = []
    for job in (r for r in rows if is_job(r.contender)):
        for other in ("raw", "naive"):
            base = by_key.get((other, job.size))
            if base is None:
                continue
            versus = f"{job.contender}/{other}" + (" (extrapolated)" if base.note else "")
            lines.append([job.size, versus,
                          fmt(ratio(job.msg_per_s, base.msg_per_s), 2),
                          fmt(ratio(job.steady_msg_per_s, base.steady_msg_per_s), 2),
                          fmt(ratio(job.steady_client_cpu_us_per_msg,
                                      base.steady_client_cpu_us_per_msg), 2),
                          fmt(ratio(job.cpu_us_per_msg, base.cpu_us_per_msg), 2),
                          fmt(ratio(job.commands_per_msg, base.commands_per_msg), 2)])
    return lines


PHASE_HEADER = ("contender", "size", "session start s", "run() s", "exit s",
                "fixed start-up s (probe)",
                "JVM peak MB", "driver Python peak MB", "Python workers peak MB",
                "executor JVM peak MB", "driver JVM heap after GC, peak MB",
                "JVM CPU s, JIT compiler: job / probe", "JVM CPU s, task threads: job / probe")


def phase_table(rows: list[Row], records: list[RunRecord]) -> list[list[str]]:
    """The job's wall time split by its own log, its memory by process role, the JVM's
    largest heap in use after a collection (what it kept alive), and the CPU of the JVM's
    compiler and task threads (the probe's beside it: what its 40 entries cost)."""
    lines = []
    for row in (r for r in rows if is_job(r.contender)):
        runs = [r for r in records if r.contender == row.contender and r.size == row.size]
        probes = [r for r in records
                  if r.contender == probe_of(row.contender) and r.size == row.size]
        rss = {role: median_of(runs, _detail("peak_rss", role))
               for role in ("jvm", "driver_python", "python_workers", "executor_jvm")}
        rss["heap_after_gc"] = row.extras.get("heap_after_gc_bytes")
        threads = [fmt(median_of(runs, _detail("jvm_threads_cpu_s", kind))) + " / "
                   + fmt(median_of(probes, _detail("jvm_threads_cpu_s", kind)))
                   for kind in ("jit", "tasks")]
        lines.append([row.contender, row.size, fmt(row.extras.get("session_s")),
                      fmt(row.extras.get("run_s")),
                      fmt(row.extras.get("exit_s")), fmt(row.fixed_s),
                      *(fmt(v / MB if v else None, 0) for v in rss.values()), *threads])
    return lines


COMMAND_HEADER = ("contender", "size", "command", "calls/msg", "usec/call", "usec/msg")


def command_table(records: list[RunRecord], contenders: Iterable[str]) -> list[list[str]]:
    """Where Redis spends its time (INFO commandstats), largest size, median run."""
    lines = []
    for contender in contenders:
        runs = [r for r in records if r.contender == contender]
        if not runs:
            continue
        largest = max(r.messages for r in runs)
        runs = sorted((r for r in runs if r.messages == largest), key=lambda r: r.wall_s)
        median_run = runs[len(runs) // 2]
        top = sorted(median_run.per_command.items(), key=lambda kv: -kv[1][1])[:TOP_COMMANDS]
        for name, (calls, usec) in top:
            lines.append([contender, median_run.size, name, fmt(calls / largest, 4),
                          fmt(usec / calls, 2), fmt(usec / largest, 3)])
    return lines


def markdown(header: Iterable[str], lines: list[list[str]]) -> str:
    """A GitHub markdown table."""
    head = list(header)
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    out += ["| " + " | ".join(line) + " |" for line in lines]
    return "\n".join(out)


PROFILE_HEADER = ("rank", "process or job function (recovery/), inclusive", "% of samples",
                  "any function, as leaf (self time)", "% of samples")
PROFILE_ROWS = 15


def profile_table(records: list[RunRecord]) -> list[list[str]]:
    """The py-spy summary of the first profiled job run at the largest size."""
    profiled = [r for r in records if is_job(r.contender) and r.details.get("py_spy")]
    if not profiled:
        return []
    largest = max(r.messages for r in profiled)
    profile = next(r for r in profiled if r.messages == largest).details["py_spy"]
    total = profile["samples"] or 1
    inclusive, leaf = profile["inclusive"], profile["leaf"]
    lines = []
    for rank in range(min(PROFILE_ROWS, max(len(inclusive), len(leaf)))):
        inc = inclusive[rank] if rank < len(inclusive) else ("", 0)
        lf = leaf[rank] if rank < len(leaf) else ("", 0)
        lines.append([str(rank + 1), f"`{inc[0]}`", fmt(100 * inc[1] / total),
                      f"`{lf[0]}`", fmt(100 * lf[1] / total)])
    return lines


TIMELINE_HEADER = ("segment, ended by the job's log line", "starts at s", "seconds",
                   "Redis CPU s", "Redis CPU us/msg", "job CPU s: JVMs / driver Python / workers",
                   "most Redis time: command (calls)")
# The job's process roles (spark_job.driver_role) in the timeline's CPU column, in its order.
TIMELINE_ROLES = (("jvm", "executor_jvm"), ("driver_python",), ("python_workers",))


def job_cpu_cell(by_role: dict[str, float] | None) -> str:
    """A segment's CPU seconds of the job's processes as ``JVMs / driver Python / workers``
    (``-`` for a run recorded without them)."""
    if not by_role:
        return "-"
    return " / ".join(fmt(sum(by_role.get(r, 0.0) for r in roles), 2) for roles in TIMELINE_ROLES)


def _median_run(records: list[RunRecord]) -> RunRecord:
    return sorted(records, key=lambda r: r.wall_s)[len(records) // 2]


def timeline_table(records: list[RunRecord], job: str = JOB) -> tuple[str, list[list[str]]]:
    """Job contender `job`'s median-wall run at the largest size cut at its log lines, with
    Redis' CPU per segment. Returns (the run's contender, size and repeat, table lines)."""
    runs = [r for r in records if r.contender == job and r.details.get("segments")]
    if not runs:
        return "", []
    largest = max(r.messages for r in runs)
    run = _median_run([r for r in runs if r.messages == largest])
    lines = []
    for seg in run.details["segments"]:
        top = ", ".join(f"{name} ({calls})" for name, calls, _usec in seg["top_commands"])
        lines.append([seg["label"] or "-", fmt(seg["start_s"]), fmt(seg["seconds"]),
                      fmt(seg["redis_cpu_s"], 2),
                      fmt(seg["redis_cpu_s"] * 1e6 / run.messages, 2),
                      job_cpu_cell(seg.get("job_cpu_s")), top or "-"])
    return f"{job} {run.size}, run #{run.repeat + 1}", lines
