"""Benchmark: recover S streams x N stuck entries with the naive loop, the best redis-py loop
and the Spark job, on fresh seeds, verified in Redis after every run.

    .venv/bin/python -m tests.benchmark.run [--sizes 100x1000,1x1000000,1000x1000,10000x100]
        [--repeats 3] [--contenders naive,raw,job] [--handler-delay-ms 0]
        [--naive-max-messages 100000] [--not-due 0.9]
        [--job-set claim.count=5000] [--variant backoff:claim.backoff_factor=2]
        [--spark-conf spark.eventLog.enabled=true]

Prints markdown tables and writes them to ``.bench/results.md`` (git-ignored), every run's
raw numbers to ``.bench/results.json`` and the job's logs under ``.bench/runs/``. The naive
loop runs only up to ``--naive-max-messages``; bigger sizes show it extrapolated (labelled).
Exit code 0, or 1 when a contender failed or Redis did not hold what an exactly-once
recovery leaves behind. With ``--handler-delay-ms X`` every contender's handler takes X ms
per message (``tests.benchmark.handlers``), as a service call would.
"""

from __future__ import annotations

import argparse
import io
import json
import logging
import os
import platform
import shlex
import shutil
import subprocess
import sys
import tarfile
import time
from dataclasses import asdict, replace
from datetime import UTC, datetime
from pathlib import Path

import redis.utils

from recovery.testing.local_redis import any_server_binary
from tests.benchmark import report, targets
from tests.benchmark.contenders import CONTENDERS, JOB, ContenderFailed, RunRecord, run_contender
from tests.benchmark.handlers import DELAY_ENV, handler_path
from tests.benchmark.seed import BacklogSpec, parse_size
from tests.benchmark.spark_job import ROOT, JobOptions
from tests.benchmark.verify import VerificationError

log = logging.getLogger("tests.benchmark")
DEFAULT_CONTENDERS = "naive,raw,job"  # raw-requeue: on request, beside a requeue job run
PROBE_SPEC = (2, 20)  # the job's fixed cost: 2 streams (one per partition) x 20 entries


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m tests.benchmark.run",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="100x1000,1x1000000,1000x1000,10000x100",
                        help="comma-separated <streams>x<entries per stream> (the default: "
                        "big streams, one hot stream and many small ones)")
    parser.add_argument("--repeats", type=int, default=3, help="runs per contender and size")
    parser.add_argument("--contenders", default=DEFAULT_CONTENDERS,
                        help=f"comma-separated subset of {','.join(CONTENDERS)}")
    parser.add_argument("--handler-delay-ms", type=float, default=0.0, metavar="MS",
                        help="per message, the handler's delay (a service call) in the job "
                             "and the loops alike; 0: the no-op handler")
    parser.add_argument("--over-limit", type=float, default=0.05,
                        help="fraction of entries delivered more than the limit")
    parser.add_argument("--not-due", type=float, default=0.0, metavar="FRACTION",
                        help="fraction of the other entries delivered 3 times, not due under "
                             "the job's backoff schedule (needs --contenders job and e.g. "
                             "--job-set claim.backoff_factor=10); they must stay pending")
    parser.add_argument("--keys", type=int, default=0, metavar="N",
                        help="give the entries an ordering key field, account = a<i mod N> "
                             "(keys interleaved), for a per-key ordered job, e.g. --variant "
                             "ordered:order.key_field=account; 0: no such field")
    parser.add_argument("--naive-max-messages", type=int, default=100_000,
                        help="run the naive loop only up to this size; extrapolate above")
    parser.add_argument("--master", action="append", default=[],
                        help="spark-submit --master (default local[2]); repeat it to run the "
                             "job on several masters in one invocation: the first one's runs "
                             "are `job`, the others' `job@<master>`")
    parser.add_argument("--job-set", action="append", default=[], metavar="SECTION.FIELD=V",
                        help="extra --set for the job (repeatable)")
    parser.add_argument("--variant", action="append", default=[],
                        metavar="NAME:SECTION.FIELD=V",
                        help="also run the job with this extra --set, as `job+NAME` beside "
                             "`job` in the same invocation (repeatable; one NAME may take "
                             "several settings), e.g. backoff:claim.backoff_factor=2")
    parser.add_argument("--spark-conf", action="append", default=[], metavar="KEY=VALUE",
                        help="extra spark-submit --conf (repeatable)")
    parser.add_argument("--code", metavar="GIT_REF",
                        help="run the job (and the loops' imports of recovery) from a pristine "
                             "export of this commit instead of the shared working tree")
    parser.add_argument("--no-probe", action="store_true",
                        help="skip the job's probe runs on a near-empty backlog (no fixed / "
                             "steady split; for quick experiments)")
    parser.add_argument("--py-spy", metavar="PATH",
                        help="profile the job's Python processes with this py-spy binary "
                             "(slows the job; the profile table shows where its time goes)")
    parser.add_argument("--wait-for-load", type=float, metavar="LOAD",
                        help="before each run, wait up to --wait-max-s for the 1-min load "
                             "average to drop below LOAD (a shared machine)")
    parser.add_argument("--wait-max-s", type=float, default=300.0,
                        help="longest wait for --wait-for-load, seconds")
    parser.add_argument("--idle-probe-s", type=float, default=1.0,
                        help="seconds to measure the seeded, idle server's own CPU use")
    parser.add_argument("--out", type=Path, default=ROOT / ".bench" / "results.md")
    parser.add_argument("--json", type=Path, default=ROOT / ".bench" / "results.json")
    args = parser.parse_args(argv)
    args.specs = [BacklogSpec(*parse_size(s), over_limit_fraction=args.over_limit,
                              not_due_fraction=args.not_due, keys=args.keys)
                  for s in args.sizes.split(",") if s]
    args.masters = args.master or ["local[2]"]
    args.contender_list = [c for c in args.contenders.split(",") if c]
    args.variants = _variants(parser, args.variant)
    args.code_root, args.code_sha = export_code(args.code) if args.code else (None, None)
    unknown = set(args.contender_list) - set(CONTENDERS)
    if args.handler_delay_ms < 0:
        parser.error("--handler-delay-ms: milliseconds per message, 0 or more")
    if args.keys < 0:
        parser.error("--keys: a number of ordering keys, 0 (none) or more")
    if unknown or args.repeats < 1 or not args.specs:
        parser.error(f"unknown contenders {sorted(unknown)}" if unknown
                     else "need at least one size and one repeat")
    if args.not_due and (args.contender_list != [JOB] or not any(
            s.startswith("claim.backoff_factor=") for s in args.job_set)):
        parser.error("--not-due: run the job alone (--contenders job) with a backoff schedule "
                     "under which entries delivered 3 times are not due, e.g. --job-set "
                     "claim.backoff_factor=10 (the loops claim every idle entry)")
    args.contender_list = [name for c in args.contender_list for name in _per_master(c, args)]
    return args


def _variants(parser: argparse.ArgumentParser, given: list[str]) -> dict[str, list[str]]:
    """``--variant NAME:SECTION.FIELD=V`` options as {NAME: [SECTION.FIELD=V, ...]}."""
    variants: dict[str, list[str]] = {}
    for option in given:
        name, _, setting = option.partition(":")
        if not name or "=" not in setting or not name.replace("-", "").isalnum():
            parser.error(f"--variant {option!r}: expected NAME:SECTION.FIELD=VALUE, NAME of "
                         "letters, digits and dashes")
        variants.setdefault(name, []).append(setting)
    return variants


def _per_master(contender: str, args: argparse.Namespace) -> list[str]:
    """The job once per master (``job``, then ``job@<master>``) and per variant
    (``job+<variant>``, ``job+<variant>@<master>``); any other contender once."""
    if contender != JOB:
        return [contender]
    return [f"{JOB}{variant}{at}" for variant in ["", *(f"+{v}" for v in args.variants)]
            for at in ["", *(f"@{master}" for master in args.masters[1:])]]


def master_of(name: str, args: argparse.Namespace) -> str:
    """The master a job contender (``job``, ``job@<master>``, ``job+<variant>@...``) runs
    on."""
    return name.partition("@")[2] or args.masters[0]


def job_settings(name: str, args: argparse.Namespace) -> tuple[str, ...]:
    """The extra ``--set`` of a job contender: ``--job-set``, then its variant's."""
    variant = name.partition("@")[0].partition("+")[2]
    return (*args.job_set, *args.variants.get(variant, []))


def _runs_for(args: argparse.Namespace, spec: BacklogSpec, repeat: int) -> list[str]:
    """Contenders of one repeat, order rotated per repeat so none always goes first."""
    names = [c for c in args.contender_list
             if c != "naive" or spec.messages <= args.naive_max_messages]
    shift = repeat % len(names) if names else 0
    return names[shift:] + names[:shift]


def _path_safe(label: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in label)


def wait_for_load(limit: float, timeout_s: float = 300.0) -> None:
    """Sleep until the 1-min load average is below `limit`, at most `timeout_s` seconds."""
    deadline = time.monotonic() + timeout_s
    while os.getloadavg()[0] >= limit and time.monotonic() < deadline:
        time.sleep(5)


def _run_one(args: argparse.Namespace, name: str, spec: BacklogSpec, repeat: int,
             probe: bool = False) -> RunRecord:
    job = report.is_job(name)
    # the probe measures the fixed start-up: without the handler's delay
    options = JobOptions(master_of(name, args) if job else args.masters[0],
                         job_settings(name, args), tuple(args.spark_conf), args.py_spy,
                         args.code_root, 0.0 if probe else args.handler_delay_ms)
    if args.wait_for_load is not None:
        wait_for_load(args.wait_for_load, args.wait_max_s)
    label = report.probe_of(name) if probe else name
    workdir = ROOT / ".bench" / "runs" / f"{spec.label}-{repeat}-{_path_safe(label)}"
    run_spec = BacklogSpec(*PROBE_SPEC, over_limit_fraction=0.05, keys=spec.keys) if probe \
        else spec
    record = run_contender(JOB if job else name, run_spec, repeat, workdir, options,
                           args.idle_probe_s)
    shutil.rmtree(workdir / "reports", ignore_errors=True)
    record = replace(record, contender=label, size=spec.label)
    log.info("%-11s %-10s #%d: %8.2f s wall, %9.0f msg/s, verified: %d acked, %d "
             "dead-lettered (load %.1f -> %.1f)", label, spec.label, repeat + 1, record.wall_s,
             record.messages / record.wall_s, record.acked, record.dead_lettered,
             record.load_avg_1m, record.load_avg_1m_end)
    return record


def run_all(args: argparse.Namespace) -> list[RunRecord]:
    """Every size, repeat and contender (plus the job's probe), each on a fresh seed."""
    records = []
    for spec in args.specs:
        for repeat in range(args.repeats):
            for name in _runs_for(args, spec, repeat):
                records.append(_run_one(args, name, spec, repeat))
                if report.is_job(name) and not args.no_probe:
                    records.append(_run_one(args, name, spec, repeat, probe=True))
    return records


def with_extrapolations(rows: list[report.Row], args: argparse.Namespace) -> list[report.Row]:
    """Add the naive loop, extrapolated, for sizes it was not run on."""
    naive = [r for r in rows if r.contender == "naive"]
    if not naive:
        return rows
    base = max(naive, key=lambda r: r.messages)
    measured = {r.size for r in naive}
    extra = [report.extrapolate(base, s.label, s.messages) for s in args.specs
             if s.label not in measured]
    return rows + extra


def in_order(rows: list[report.Row], args: argparse.Namespace) -> list[report.Row]:
    """By size as given, then naive, raw, job."""
    size = {s.label: i for i, s in enumerate(args.specs)}
    rank = {c: i for i, c in enumerate(args.contender_list)}
    return sorted(rows, key=lambda r: (size.get(r.size, 0), rank.get(r.contender, 0)))


def server_version() -> str:
    _flavor, binary = any_server_binary()
    done = subprocess.run([binary, "--version"], capture_output=True, text=True, check=False)
    return done.stdout.strip()


def git(*args: str) -> bytes:
    """Output of a read-only git command in the repository."""
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, check=True).stdout


def export_code(ref: str) -> tuple[Path, str]:
    """``recovery/`` and ``jobs/`` of commit `ref`, extracted once under .bench/code/<sha>
    (git archive: nothing in the repository changes). Returns (directory, short sha)."""
    sha = git("rev-parse", "--short", f"{ref}^{{commit}}").decode().strip()
    target = ROOT / ".bench" / "code" / sha
    if not (target / "jobs").is_dir():
        archive = git("archive", "--format=tar", sha, "recovery", "jobs")
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            tar.extractall(target, filter="data")
    return target, sha


def code_version(args: argparse.Namespace) -> str:
    """The commit measured, and the files of the job changed on top of it (shared tree)."""
    if args.code_root is not None:
        return f"commit {args.code_sha} (a pristine export: {args.code_root})"
    changed = git("status", "--porcelain", "--", "recovery", "jobs").decode().splitlines()
    dirty = ", ".join(line[3:] for line in changed) if changed else "none"
    head = git("rev-parse", "--short", "HEAD").decode().strip()
    return f"commit {head} plus uncommitted changes in: {dirty}"


def conditions(args: argparse.Namespace, argv: list[str], records: list[RunRecord]
               ) -> list[str]:
    """How the numbers were taken, for the reader of the table."""
    loads = sorted([r.load_avg_1m for r in records] + [r.load_avg_1m_end for r in records])
    idle = sorted(r.redis_idle_cpu_per_s for r in records)
    return [
        f"- command: `.venv/bin/python -m tests.benchmark.run {shlex.join(argv)}`",
        f"- date: {datetime.now(UTC):%Y-%m-%d %H:%M} UTC; host: {os.cpu_count()} "
        f"CPUs, {platform.platform()}; Python {platform.python_version()}; redis-py "
        f"{redis.__version__}, hiredis parser: {'yes' if redis.utils.HIREDIS_AVAILABLE else 'no'}",
        f"- code: {code_version(args)}",
        f"- server: {server_version()}, a fresh one per run, no persistence; its idle CPU "
        f"(measured before each run, subtracted): median {idle[len(idle) // 2] * 1000:.2f} "
        "ms/s",
        f"- handler: {_handler_line(args.handler_delay_ms)}",
        f"- job: spark-submit --master {' / '.join(args.masters)}, "
        f"--set {' '.join(args.job_set) or '(defaults)'}; conf {' '.join(args.spark_conf) or '-'}"
        + "".join(f"; job+{name}: --set {' '.join(sets)}" for name, sets in args.variants.items())
        + f"; fixed start-up = wall of spark-submit on {PROBE_SPEC[0]}x{PROBE_SPEC[1]} run "
        "right after each job run, steady = job wall - that"
        + ("; profiled with py-spy (slower)" if args.py_spy else ""),
        f"- backlog: {args.over_limit:.0%} of entries over max_deliveries=5"
        + (f", {args.keys} ordering keys interleaved (field account)" if args.keys else "")
        + (f", {args.not_due:.0%} of the rest delivered 3 times (not due)" if args.not_due
           else "") + ", 4 fields, ~200 "
        f"bytes each; medians of {args.repeats} runs; 1-min load average at run starts/ends: "
        f"min {loads[0]:.1f}, median {loads[len(loads) // 2]:.1f}, max {loads[-1]:.1f} "
        "(other work shared the machine)",
    ]


def _handler_line(delay_ms: float) -> str:
    """Which handler every contender ran, for the conditions."""
    if not delay_ms:
        return f"{handler_path(0)} in the job, the same no-op in the loops"
    return (f"{handler_path(delay_ms)}, {delay_ms:g} ms per message ({DELAY_ENV}), in the "
            "job and the loops alike; the job's probe runs with the no-op handler")


def render(args: argparse.Namespace, argv: list[str], records: list[RunRecord]) -> str:
    """All tables as one markdown document."""
    rows = in_order(with_extrapolations(report.build_rows(records), args), args)
    parts = ["## Benchmark results", *conditions(args, argv, records), "",
             report.markdown(report.MAIN_HEADER, report.main_table(rows))]
    sections = [
        ("Ratios (job / other; msg/s above 1 = job faster, CPU below 1 = job cheaper)",
         report.RATIO_HEADER, report.ratio_table(rows)),
        ("Marginal rates (extra messages / extra wall time, between consecutive sizes)",
         report.MARGINAL_HEADER, report.marginal_table(rows)),
        ("The job's wall time by its log, and its memory by process",
         report.PHASE_HEADER, report.phase_table(rows, records)),
        ("Redis time by command (INFO commandstats; largest size, median run)",
         report.COMMAND_HEADER, report.command_table(records, args.contender_list)),
    ]
    for title, header, lines in sections:
        if lines:
            parts += ["", f"### {title}", "", report.markdown(header, lines)]
    for job in filter(report.is_job, args.contender_list):
        which, segments = report.timeline_table(records, job)
        if segments:
            parts += ["", f"### The job's timeline ({which}; Redis sampled every 0.5 s)", "",
                      report.markdown(report.TIMELINE_HEADER, segments)]
    profile = report.profile_table(records)
    if profile:
        title = ("### py-spy: the job's Python processes (largest size, first profiled run; "
                 "samples of running threads, all processes together)")
        parts += ["", title, "", report.markdown(report.PROFILE_HEADER, profile)]
    issue_49 = targets.issue_49(rows, records, args.masters[0])
    for issue, checks in (("3", targets.issue_3(rows)), ("30", targets.issue_30(rows, records)),
                          ("49", issue_49), ("63", targets.issue_63(rows, records))):
        if checks:
            parts += ["", f"### Targets of issue {issue} (measured, not asserted)", "", *checks]
    return "\n".join(parts) + "\n"


def write_outputs(args: argparse.Namespace, text: str, records: list[RunRecord]) -> None:
    """The tables (markdown) and every run's numbers (JSON)."""
    for path in (args.out, args.json):
        path.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    args.json.write_text(json.dumps({"records": [asdict(r) for r in records]}, indent=1))


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", stream=sys.stderr)
    try:
        records = run_all(args)
    except (ContenderFailed, VerificationError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    text = render(args, argv, records)
    write_outputs(args, text, records)
    print(text)
    print(f"written: {args.out}, {args.json}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
