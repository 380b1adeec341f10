"""The issues' targets beside what one benchmark invocation measured (printed, never asserted).

- issue 3 (big streams): the job's steady rate against the raw loop's, Redis CPU per message,
  1M end to end, the marginal rates, and the driver's memory as the backlog grows;
- issue 30 (many small streams): per job contender and backlog of as many entries as a
  backlog with fewer streams, the one pass against the raw loop's whole run, end to end
  against the fewer streams' run, and Redis commands and CPU per message against the raw
  loop's.
"""

from __future__ import annotations

from tests.benchmark.contenders import RunRecord
from tests.benchmark.report import JOB, MB, Row, fmt, is_job, marginals, median_of, ratio
from tests.benchmark.seed import parse_size

# The job's log line that ends the one pass (recovery/driver/job.py), as a segment label.
PASS_LABEL = "claim, dead-letter, handler, acks and report done"


def issue_3(rows: list[Row]) -> list[str]:
    """Issue 3's targets, one line each with the measured value."""
    jobs = sorted((r for r in rows if is_job(r.contender)), key=lambda r: r.messages)
    raw = {r.size: r for r in rows if r.contender == "raw"}
    out = []
    for job in jobs:
        base = raw.get(job.size)
        if base is not None:
            out.append(f"- {job.size}: {job.contender} steady "
                       f"{fmt(job.steady_msg_per_s, 0)} msg/s vs raw "
                       f"{fmt(base.steady_msg_per_s, 0)} (target: job >= raw, aim 200k); "
                       f"Redis CPU/msg job/raw "
                       f"{fmt(ratio(job.cpu_us_per_msg, base.cpu_us_per_msg), 2)}x "
                       "(target <= 1.2x)")
        if job.messages >= 1_000_000:
            out.append(f"- {job.size}: {job.contender} end to end {fmt(job.wall_s)} s "
                       "(target < 25 s)")
    rates = {(m.contender, m.small, m.large): m for m in marginals(rows)}
    for (contender, small, large), job_m in rates.items():
        raw_m = rates.get(("raw", small, large))
        if is_job(contender) and raw_m is not None:
            out.append(f"- marginal {small} -> {large}: {contender} "
                       f"{fmt(job_m.msg_per_s, 0)} msg/s vs "
                       f"raw {fmt(raw_m.msg_per_s, 0)} "
                       f"({fmt(ratio(job_m.msg_per_s, raw_m.msg_per_s), 2)}x; target: job >= "
                       "raw)")
    return out + _memory_growth([j for j in jobs if j.contender == JOB])


def _memory_growth(jobs: list[Row]) -> list[str]:
    """The first master's driver memory, the largest backlog against the smallest; the
    target (1M within 10% of 100k) is about more entries, so it is named only where the
    entries grew."""
    if len(jobs) < 2:
        return []
    small, large = jobs[0], jobs[-1]
    if not small.peak_rss_mb or not large.peak_rss_mb:
        return []
    target = "target <= 1.10x" if large.messages > small.messages else "as many entries: no target"
    out = [f"- driver peak RSS {large.size} / {small.size}: "
           f"{large.peak_rss_mb / small.peak_rss_mb:.2f}x ({target})"]
    before, after = (j.extras.get("heap_after_gc_bytes") for j in (small, large))
    if before and after:
        out.append(f"- driver JVM heap in use after GC, peak, {large.size} / {small.size}: "
                   f"{after / before:.2f}x ({before / MB:.0f} -> {after / MB:.0f} MB)")
    return out


def pass_seconds(records: list[RunRecord], contender: str, size: str) -> float | None:
    """Median seconds of the one pass (the timeline segment its log line ends) over the runs
    of `contender` at `size`; None where no run logged it (e.g. the materialised path)."""
    def seconds(record: RunRecord) -> float | None:
        for segment in record.details.get("segments") or []:
            if segment["label"].startswith(PASS_LABEL):
                return float(segment["seconds"])
        return None

    runs = [r for r in records if r.contender == contender and r.size == size]
    return median_of(runs, seconds)


def issue_30(rows: list[Row], records: list[RunRecord]) -> list[str]:
    """Issue 30's targets, one line per job contender and backlog spread over more streams
    than another measured backlog of as many entries (the one with the fewest streams)."""
    raw = {r.size: r for r in rows if r.contender == "raw" and r.runs}
    out = []
    for job in (r for r in rows if is_job(r.contender) and r.runs):
        fewer = min((r for r in rows if r.contender == job.contender and r.runs
                     and r.messages == job.messages),
                    key=lambda r: parse_size(r.size)[0])
        if parse_size(fewer.size)[0] >= parse_size(job.size)[0]:
            continue
        base, passed = raw.get(job.size), pass_seconds(records, job.contender, job.size)
        line = f"- {job.size}: {job.contender}"
        if base is not None:
            line += (f" the pass {fmt(passed, 2)} s, "
                     f"{fmt(ratio(passed, base.wall_s), 3)}x the raw loop's {fmt(base.wall_s, 2)} s"
                     " (target <= 1.1x);")
        line += (f" end to end {fmt(job.wall_s)} s, {fmt(ratio(job.wall_s, fewer.wall_s), 3)}x"
                 f" the {fewer.size} run's {fmt(fewer.wall_s)} s (target <= 1.2x)")
        if base is not None:
            line += ("; Redis commands and CPU per message "
                     f"{fmt(ratio(job.commands_per_msg, base.commands_per_msg), 3)}x and "
                     f"{fmt(ratio(job.cpu_us_per_msg, base.cpu_us_per_msg), 3)}x the raw "
                     "loop's (targets <= 1.2x)")
        out.append(line)
    return out
