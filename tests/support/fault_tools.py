"""Helpers of the fault and bad-input tests: real job processes and what they left in Redis.

- the recording handler's control file (``tests.support.handlers:recording`` reads it on
  executors; its path goes into the environment here, at import, before the suite's
  SparkSession starts);
- a small stuck backlog with one kind of entry per expected fate;
- the job run in-process (``RecoverJob`` with the suite's session) or as a real spark-submit
  process, and SIGKILL of that process with everything it started;
- what Redis says afterwards: hand-overs recorded by the handler, job consumers, DLQ entries.
"""

from __future__ import annotations

import io
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping
from contextlib import redirect_stderr, redirect_stdout, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession
from redis import Redis

from recovery.executor.faults import FIRED_SUFFIX
from recovery.jobs.recover import RecoverJob
from recovery.redis_io.dlq_names import dead_letter_key
from recovery.report.run_report import read_run, run_path
from recovery.spark.local import LOCAL_JVM_OPTIONS
from recovery.testing.backlog import add_entries, create_group, deliver, make_stuck
from tests.support.backlogs import DEAD, HOUR_MS, binary_fields
from tests.support.handlers import CHECKSUM, CONTROL_ENV, HANDLED, checksum
from tests.support.tier import require_slow

ROOT = Path(__file__).resolve().parents[2]
SPARK_SUBMIT = ROOT / ".venv" / "bin" / "spark-submit"
CONTROL_FILE = Path(os.environ.setdefault(
    CONTROL_ENV, f"/tmp/recovery-test-handler-{os.getpid()}.json"))
GROUP = "g"
Key = tuple[str, str, str]  # stream, group, id

# kind -> (entries per stream, delivery count before the run); max_deliveries must be 5.
KINDS: dict[str, tuple[int, int]] = {
    "ok": (40, 1),             # handled and acked
    "poison": (6, 9),          # over the limit: dead-lettered, never handed over
    "fail_at_limit": (4, 4),   # the handler fails it at the limit: dead-lettered
    "fail": (4, 1),            # the handler fails it: stays pending
    "deleted": (3, 1),         # deleted upstream before the run: never handed over
}
# The handler's third verdict: it rejects an entry carrying a ``reject`` field
# (Result.dead_letter, tests.support.handlers.verify_or_fail), dead-lettered in the run that
# handles it, whatever its count (the kill and task-failure trials seed it too).
REJECTED_KIND: dict[str, tuple[int, int]] = {"rejected": (3, 1)}
# Runs under a backoff schedule (BACKOFF) also get entries not due: delivered twice, idle
# 2 min (kind -> (entries per stream, delivery count, idle ms)).
WAITING_KIND: dict[str, tuple[int, ...]] = {"waiting": (5, 2, 120_000)}
# From min_idle_ms m (1 s or more): delivered once, due at m; more often, at 1000 m (16 min
# or more), at most 50 min: every entry idle an hour is due, a "waiting" one is not due for
# the whole test.
BACKOFF = ("claim.backoff_factor=1000", "claim.backoff_max_ms=3000000")
# Runs that split each stream over two parts (50 or more entries per stream, four partitions:
# each stream holds more than its share), claimed through a shared cursor in steps of 5.
SPLIT = ("spark.partitions=4", "spark.split_min_pending=10", "claim.count=5")


def write_control(url: str, **control: Any) -> None:
    """Tell the recording handler where to record and how to behave (atomic replace)."""
    tmp = CONTROL_FILE.with_suffix(".tmp")
    tmp.write_text(json.dumps({"url": url, **control}))
    tmp.replace(CONTROL_FILE)


def seed_kinds(client: Redis, streams: list[str],
               kinds: Mapping[str, tuple[int, ...]] = KINDS, group: str = GROUP,
               flag: str | None = None) -> dict[Key, str]:
    """Stuck entries (owned by a dead consumer, idle an hour unless a kind's third number
    says otherwise, in ms) of every kind: key -> kind.

    `flag`: a field name every entry also carries (tests.support.handlers:recording reacts to it).
    """
    seeded: dict[Key, str] = {}
    for stream in streams:
        create_group(client, stream, group)
        for kind, (count, deliveries, *idle) in kinds.items():
            ids = add_entries(client, stream, count, lambda i, k=kind: _fields(i, k, flag))
            assert deliver(client, stream, group, DEAD, count) == ids
            make_stuck(client, stream, group, DEAD, ids, idle[0] if idle else HOUR_MS,
                       deliveries)
            if kind == "deleted":
                client.xdel(stream, *ids)
            seeded.update({(stream, group, i): kind for i in ids})
    return seeded


def _fields(i: int, kind: str, flag: str | None) -> dict[bytes, bytes]:
    fields = binary_fields(i, kind)
    if flag:
        fields[flag.encode()] = b"1"
        fields[CHECKSUM] = checksum(list(fields.items()))
    return fields


def job_args(url: str, reports: Path, streams: list[str], *overrides: str,
             run_id: str | None = None) -> list[str]:
    """Arguments of jobs/recover.py for the recording handler and max_deliveries 5."""
    sets = [f"redis.url={url}", f"report.path={reports}", "streams.keys=" + ",".join(streams),
            "claim.max_deliveries=5", "handler.path=tests.support.handlers:recording", *overrides]
    args = [a for s in sets for a in ("--set", s)]
    return [*args, "--run-id", run_id] if run_id else args


def planned(spark: SparkSession, url: str, reports: Path, streams: list[str],
            *overrides: str) -> list[str]:
    """A dry run now (in-process, with `overrides`): the arguments that apply its plan."""
    dry = run_in_process(spark, [*job_args(url, reports, streams, *overrides), "--dry-run"])
    assert dry.code == 0 and dry.summary["report_path"], dry.stderr[-2000:]
    return ["--plan", dry.summary["report_path"]]


@dataclass
class JobResult:
    """Exit code, the parsed last stdout line, and stderr of one run."""

    code: int
    summary: dict[str, Any]
    stderr: str
    seconds: float

    def error_lines(self) -> list[str]:
        return [line for line in self.stderr.splitlines() if line.startswith("error: ")]


def run_in_process(spark: SparkSession | None, argv: list[str]) -> JobResult:
    """The job's CLI in this process, on the suite's session; stdout and stderr captured.

    `spark` None: the run must fail before it needs a session.
    """
    out, err = io.StringIO(), io.StringIO()
    started = time.monotonic()
    with redirect_stdout(out), redirect_stderr(err):
        code = RecoverJob(lambda _settings: spark or _no_session()).main(argv)
    return JobResult(code, _last_json(out.getvalue()), err.getvalue(),
                     time.monotonic() - started)


def _no_session() -> SparkSession:
    raise AssertionError("the run asked for a SparkSession although it should fail before")


def _last_json(stdout: str) -> dict[str, Any]:
    lines = stdout.strip().splitlines()
    assert lines, "the job printed nothing on stdout"
    return json.loads(lines[-1])  # type: ignore[no-any-return]


def spark_submit(argv: list[str], logs: Path, *confs: str, master: str = "local[2]"
                 ) -> subprocess.Popen[bytes]:
    """Start jobs/recover.py under spark-submit (local[2]: tasks are not retried, so the job
    claims and hands over in one pass); stdout/stderr go to files."""
    require_slow("a spark-submit run of the job")
    logs.mkdir(parents=True, exist_ok=True)
    cmd = [str(SPARK_SUBMIT), "--master", master, "--conf", "spark.ui.enabled=false",
           "--driver-java-options", LOCAL_JVM_OPTIONS]
    for conf in confs:
        cmd += ["--conf", conf]
    cmd += [str(ROOT / "jobs" / "recover.py"), *argv]
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
    with open(logs / "stdout", "wb") as out, open(logs / "stderr", "wb") as err:
        return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=out, stderr=err)


def finished(proc: subprocess.Popen[bytes], logs: Path, timeout_s: float) -> JobResult:
    """Wait for a spark-submit process; its exit code, summary line and output.

    ``stderr`` holds both streams: spark-submit's PythonRunner merges the driver's stderr
    into its own stdout, so the ``error:`` line arrives there, just before the JSON line.
    """
    started = time.monotonic()
    code = proc.wait(timeout=timeout_s)
    stdout = (logs / "stdout").read_text(errors="replace")
    output = (logs / "stderr").read_text(errors="replace") + stdout
    return JobResult(code, _last_json(stdout), output, time.monotonic() - started)


SPARK_INFO = re.compile(r"^\d\d/\d\d/\d\d \d\d:\d\d:\d\d INFO ", re.MULTILINE)
QUIET_SPARK_INFO = 5  # the few lines spark-submit prints at INFO before the context starts


def spark_info_lines(output: str) -> int:
    """How many of Spark's own INFO log lines `output` (a spark-submit's) holds."""
    return len(SPARK_INFO.findall(output))


def descendants(pid: int) -> list[int]:
    """Every process below `pid` (from /proc), parents before children."""
    children: dict[int, list[int]] = defaultdict(list)
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        children[int(fields[1])].append(int(stat.parent.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(0), []):
            found.append(child)
            todo.append(child)
    return found


def kill_tree(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL the process and everything it started, as when a container dies.

    Spark's Python daemon sets its own process group, so killing the group would miss the
    workers. Freeze the tree first (SIGSTOP, repeated until no new process shows up), so
    nothing forks or touches Redis between the listing and the kill.
    """
    frozen: list[int] = []
    while True:
        new = [p for p in [proc.pid, *descendants(proc.pid)] if p not in frozen]
        if not new:
            break
        for pid in new:
            _signal(pid, signal.SIGSTOP)
            frozen.append(pid)
    for pid in frozen:
        _signal(pid, signal.SIGKILL)
    proc.wait(timeout=30)


def kill_landed(proc: subprocess.Popen[bytes]) -> bool:
    """SIGKILL the tree (kill_tree); True only if that kill is what ended the job: it was
    still running when frozen and its exit status is SIGKILL's (a job that exited on its own
    meanwhile keeps its own exit code)."""
    running = proc.poll() is None
    kill_tree(proc)
    return running and proc.returncode == -signal.SIGKILL


def _signal(pid: int, sig: signal.Signals) -> None:
    with suppress(ProcessLookupError):
        os.kill(pid, sig)


def wait_until(condition: Callable[[], bool], proc: subprocess.Popen[bytes] | None,
               timeout_s: float, what: str) -> bool:
    """Poll `condition` every 20 ms. False if `proc` exits first; fails after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        if proc is not None and proc.poll() is not None:
            return False
        time.sleep(0.02)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


def fired_faults() -> Counter[str]:
    """How often each injected fault line (``<stage> <step> <attempt>``) fired so far: read
    from the marker recovery.executor.faults writes beside RECOVERY_FAULT_FILE."""
    marker = Path(os.environ["RECOVERY_FAULT_FILE"] + FIRED_SUFFIX)
    lines = marker.read_text(encoding="utf-8").splitlines() if marker.exists() else []
    return Counter(line for line in lines if line.strip())


def assert_fired(*asked: str) -> Counter[str]:
    """Fail unless every asked fault line fired at least once; returns fired_faults()."""
    fired = fired_faults()
    missed = [line for line in asked if not fired[" ".join(line.split())]]
    assert not missed, f"injected faults that never fired: {missed} (fired: {dict(fired)})"
    return fired


def handed_over(client: Redis) -> Counter[Key]:
    """How often the recording handler was handed each entry."""
    counts: Counter[Key] = Counter()
    for key, n in client.hgetall(HANDLED).items():
        stream, group, entry_id = key.decode().split(" ")
        counts[(stream, group, entry_id)] = int(n)
    return counts


def pending_per_consumer(client: Redis, streams: Iterable[str], group: str = GROUP
                         ) -> Counter[str]:
    """Pending entries per consumer name, over `streams` (XPENDING summary form)."""
    counts: Counter[str] = Counter()
    for stream in streams:
        for c in client.xpending(stream, group)["consumers"]:
            counts[c["name"].decode()] += int(c["pending"])
    return counts


def job_owned(client: Redis, streams: Iterable[str], run_id: str, group: str = GROUP) -> int:
    """Entries pending on the job consumers of `run_id`."""
    prefix = f"recovery-{run_id}-"
    counts = pending_per_consumer(client, streams, group)
    return sum(n for name, n in counts.items() if name.startswith(prefix))


def owned_by(client: Redis, streams: Iterable[str], consumer: str, group: str = GROUP) -> int:
    """Entries pending on `consumer`."""
    return pending_per_consumer(client, streams, group)[consumer]


def job_consumers(client: Redis, stream: str, group: str = GROUP) -> list[str]:
    """Names of the job's consumers (``recovery-...``) still in the group."""
    return [c["name"].decode() for c in client.xinfo_consumers(stream, group)
            if c["name"].startswith(b"recovery-")]


def dead_letter_total(client: Redis, streams: Iterable[str]) -> int:
    return sum(client.xlen(dead_letter_key(s, ":dlq")) for s in streams)


def dead_letter_index(client: Redis, streams: Iterable[str]) -> dict[Key, tuple[str, dict]]:
    """(stream, group, original id) -> (dead-letter ID, fields) of every dead letter."""
    index = {}
    for stream in streams:
        for dlq_id, fields in client.xrange(dead_letter_key(stream, ":dlq")):
            key = (fields[b"x-original-stream"].decode(), fields[b"x-original-group"].decode(),
                   fields[b"x-original-id"].decode())
            index[key] = (dlq_id.decode(), fields)
    return index


def report_rows(spark: SparkSession, base: Path, run_id: str) -> list[dict[str, Any]] | None:
    """The committed report rows of one run, or None when the run left no readable report
    (a killed run: Spark commits a write only when the whole job succeeds)."""
    if not list(Path(run_path(str(base), run_id)).glob("*.parquet")):
        return None
    return [r.asDict() for r in read_run(spark, str(base), run_id).collect()]


def rows_by_key(rows: Iterable[dict[str, Any]]) -> dict[Key, list[dict[str, Any]]]:
    index: dict[Key, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        index[(row["stream"], row["group"], row["id"])].append(row)
    return index


def key_of(entry: str) -> Key:
    """Inverse of tests.support.handlers.entry_key."""
    stream, group, entry_id = entry.split(" ")
    return stream, group, entry_id


def json_summary(main: Callable[[], int]) -> tuple[int, dict[str, Any]]:
    """Run an entry point in this process: its exit code and its JSON summary line."""
    out = io.StringIO()
    with redirect_stdout(out), redirect_stderr(io.StringIO()):
        code = main()
    return code, json.loads(out.getvalue().strip().splitlines()[-1])
