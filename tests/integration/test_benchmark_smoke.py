"""The benchmark harness end to end at a tiny size, so it cannot rot (no Spark, a few seconds).

Timings are what the harness prints; they are never asserted here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import psutil
import pytest

from recovery.handlers import Message, noop
from recovery.redis_io.dlq_names import dead_letter_key
from recovery.testing.local_redis import LocalServer
from tests.benchmark import handlers, report, spark_log, targets, timeline
from tests.benchmark.contenders import RunRecord
from tests.benchmark.loops import DLQ_SUFFIX, run_loop
from tests.benchmark.measure import TREE_EVERY, LastSeenCpu, PeakRss, Sample
from tests.benchmark.run import job_settings, main, master_of, parse_args
from tests.benchmark.seed import BacklogSpec, parse_size, seed_backlog
from tests.benchmark.spark_job import (
    EXECUTOR_CLASS,
    JobOptions,
    config_text,
    driver_role,
    submit_command,
)
from tests.benchmark.verify import VerificationError, verify_recovered

SPEC = BacklogSpec(streams=3, per_stream=200)  # 5% over the limit: 10 per stream
MARK = "benchmark-smoke-child"  # in the command line of a child a poller test starts


@pytest.mark.slow
def test_harness_runs_both_loops_with_a_slow_handler_and_verifies_them(tmp_path: Path) -> None:
    """Both loops at one stream and at four, their handler 1 ms per message: the delay must
    reach the loops' own processes (their own timers hold at least that much sleep)."""
    out, raw_json = tmp_path / "results.md", tmp_path / "results.json"
    code = main(["--sizes", "1x200,4x50", "--repeats", "1", "--handler-delay-ms", "1",
                 "--contenders", "naive,raw,raw-requeue", "--idle-probe-s", "0.1",
                 "--out", str(out), "--json", str(raw_json)])

    assert code == 0  # each run verified in Redis: raw-requeue's copies are in their streams
    records = json.loads(raw_json.read_text())["records"]
    assert sorted((r["contender"], r["size"], r["acked"], r["dead_lettered"],
                   r["handler_delay_ms"]) for r in records) == [
        ("naive", "1x200", 190, 10, 1.0), ("naive", "4x50", 192, 8, 1.0),
        ("raw", "1x200", 190, 10, 1.0), ("raw", "4x50", 192, 8, 1.0),
        ("raw-requeue", "1x200", 190, 10, 0.0), ("raw-requeue", "4x50", 192, 8, 0.0)]
    handled = [r for r in records if r["contender"] != "raw-requeue"]
    assert all(r["steady_s"] >= r["acked"] / 1000 for r in handled)  # 1 ms per handled entry
    requeue = next(r for r in records if r["contender"] == "raw-requeue")
    assert requeue["per_command"]["xadd"][0] >= 190  # one XADD per copy
    assert all(r["round_trips"] > 0 and r["redis_commands"] > 0 for r in records)
    table = out.read_text()
    assert "- handler: tests.benchmark.handlers:slow_service, 1 ms per message" in table
    assert "| naive | 1x200 | 1 |" in table
    main_table = table.split("| contender | size | runs |")[1].split("\n\n")[0]
    delays = {tuple(line.split(" | ")[:2]): line.split(" | ")[-1]
              for line in main_table.splitlines()[2:]}
    assert delays == {("| naive", "1x200"): "1 |", ("| raw", "1x200"): "1 |",
                      ("| raw-requeue", "1x200"): "0 |", ("| naive", "4x50"): "1 |",
                      ("| raw", "4x50"): "1 |", ("| raw-requeue", "4x50"): "0 |"}


def test_the_job_runs_once_per_master_given() -> None:
    args = parse_args(["--contenders", "raw,job", "--master", "local[2]",
                       "--master", "local-cluster[2,1,1024]"])

    assert args.contender_list == ["raw", "job", "job@local-cluster[2,1,1024]"]
    assert [master_of(name, args) for name in args.contender_list[1:]] == [
        "local[2]", "local-cluster[2,1,1024]"]
    assert report.probe_of("job@local-cluster[2,1,1024]") == "job-startup@local-cluster[2,1,1024]"
    assert parse_args(["--contenders", "job"]).contender_list == ["job"]


def test_a_variant_runs_the_job_again_with_its_settings() -> None:
    args = parse_args(["--contenders", "raw,job", "--job-set", "claim.count=500",
                       "--variant", "backoff:claim.backoff_factor=2",
                       "--variant", "backoff:claim.backoff_max_ms=60000",
                       "--master", "local[2]", "--master", "local-cluster[2,1,1024]"])

    assert args.contender_list == ["raw", "job", "job@local-cluster[2,1,1024]", "job+backoff",
                                   "job+backoff@local-cluster[2,1,1024]"]
    assert job_settings("job", args) == ("claim.count=500",)
    assert job_settings("job+backoff@local-cluster[2,1,1024]", args) == (
        "claim.count=500", "claim.backoff_factor=2", "claim.backoff_max_ms=60000")
    assert master_of("job+backoff", args) == "local[2]"
    assert report.is_job("job+backoff") and report.is_probe(report.probe_of("job+backoff"))
    with pytest.raises(SystemExit):
        parse_args(["--variant", "claim.backoff_factor=2"])


def test_verification_fails_on_pending_and_doubled_entries(redis_server: LocalServer) -> None:
    client = redis_server.client()
    seeded = seed_backlog(client, SPEC)
    assert sum(len(ids) for ids in seeded.over_limit.values()) == 30
    with pytest.raises(VerificationError, match="still pending"):
        verify_recovered(client, seeded)

    tally = run_loop("raw", SPEC, redis_server.url)
    assert (tally.acked, tally.dead_lettered) == (570, 30)
    assert verify_recovered(client, seeded).dead_lettered == 30

    stream = SPEC.stream_names()[0]
    dlq = dead_letter_key(stream, DLQ_SUFFIX)
    [(_, first)] = client.xrange(dlq, count=1)  # type: ignore[misc]
    client.xadd(dlq, first)  # type: ignore[arg-type]  # the same entry dead-lettered twice
    with pytest.raises(VerificationError, match="dead-lettered 2 times"):
        verify_recovered(client, seeded)


def test_keys_seeded_interleaved_and_recovered_by_the_raw_loop(redis_server: LocalServer
                                                              ) -> None:
    """--keys 7: entry i of a stream carries ``account`` = ``a<i mod 7>`` (the ordered
    variant's key field), the other fields as without keys; the raw loop, which calls the
    job's dead-letter script in its current layout, still recovers everything."""
    client = redis_server.client()
    spec = BacklogSpec(streams=2, per_stream=50, keys=7)
    seeded = seed_backlog(client, spec)
    for name in spec.stream_names():
        fields = [f for _, f in client.xrange(name)]
        assert [f[b"account"] for f in fields] == [f"a{i % 7}".encode() for i in range(1, 51)]
        assert all(set(f) == {b"order_id", b"amount_cents", b"currency", b"payload",
                              b"account"} for f in fields)
    run_loop("raw", spec, redis_server.url)
    assert verify_recovered(client, seeded).dead_lettered == 2 * 2


def test_entries_seeded_not_due_must_stay_pending(redis_server: LocalServer) -> None:
    """--not-due: about 90% of the entries not over the limit are delivered 3 times; the
    verification wants exactly those still pending as seeded, so a loop that claims every
    idle entry (as the job without a schedule would) fails it."""
    client = redis_server.client()
    spec = BacklogSpec(streams=3, per_stream=200, not_due_fraction=0.9)
    seeded = seed_backlog(client, spec)
    assert 480 <= seeded.not_due_total <= 540
    # keyed by stream and ID: streams seeded in the same millisecond share IDs
    counts = {(name, r["message_id"].decode()): r["times_delivered"]
              for name in spec.stream_names()
              for r in client.xpending_range(name, spec.group, "-", "+", 1000)}
    waiting = {(s, i) for s, ids in seeded.not_due.items() for i in ids}
    over = {(s, i) for s, ids in seeded.over_limit.items() for i in ids}
    assert not waiting & over
    assert {i: n for i, n in counts.items() if n == 3} == dict.fromkeys(waiting, 3)
    run_loop("raw", spec, redis_server.url)
    with pytest.raises(VerificationError, match="seeded not due"):
        verify_recovered(client, seeded)


def test_not_due_needs_the_job_alone_with_a_schedule() -> None:
    with pytest.raises(SystemExit):
        parse_args(["--not-due", "0.9", "--contenders", "job"])
    with pytest.raises(SystemExit):
        parse_args(["--not-due", "0.9", "--job-set", "claim.backoff_factor=10"])
    args = parse_args(["--not-due", "0.9", "--contenders", "job",
                       "--job-set", "claim.backoff_factor=10"])
    assert all(s.not_due_fraction == 0.9 for s in args.specs)


JOB_LOG = """\
2026-11-21 18:00:10,000 INFO recovery.driver.job: run r1: 2 units with pending entries, 0 skipped
26/11/21 18:00:12 INFO DAGScheduler: Job 0 finished: collect at job.py:140, took 1500.5 ms
26/11/21 18:00:12 INFO PythonRunner: Times: total = 900, boot = 700, init = 150, finish = 50
2026-11-21 18:00:20,500 INFO recovery.driver.job: run r1: claim done in 10.5 s
2026-11-21 18:00:30,000 INFO recovery.driver.job: run r1 summary
stream  group  reprocessed
"""


def test_job_log_parsing_and_timeline() -> None:
    """The parsing the job contender relies on: if the job's log format changes, this says so
    (the job itself is too slow for the smoke test)."""
    started = datetime(2026, 11, 21, 18, 0, 0).timestamp()
    lines = spark_log.job_lines(JOB_LOG, started)
    assert [(ln.at_s, ln.logger) for ln in lines] == [
        (10.0, "recovery.driver.job"), (20.5, "recovery.driver.job"), (30.0, "recovery.driver.job")]
    assert spark_log.phases(lines, duration_s=20.0, wall_s=31.0) == {
        "session_s": 10.0, "run_s": 20.0, "exit_s": 1.0}
    assert spark_log.spark_actions(JOB_LOG)[0].took_ms == 1500.5
    assert spark_log.python_task_ms(JOB_LOG)["boot"] == 700

    samples = [Sample(started + t, cpu, {"xautoclaim": (calls, calls * 100)})
               for t, cpu, calls in ((0, 0.0, 0), (10, 0.1, 0), (20, 1.1, 50), (40, 1.2, 50))]
    # The job's processes' CPU per role as PeakRss polls it: a worker appears at 15 s.
    roles = [(started + t, by_role) for t, by_role in (
        (0.0, {"jvm": 0.5}), (10.0, {"jvm": 2.0, "driver_python": 1.0}),
        (20.4, {"jvm": 3.0, "driver_python": 1.5, "python_workers": 4.0}),
        (20.6, {"jvm": 9.0, "driver_python": 9.0, "python_workers": 9.0}))]
    segments = timeline.segments(lines, started, 31.0, samples, roles)
    assert [s.label for s in segments] == [
        "2 units with pending entries, 0 skipped", "claim done in 10.5 s", "summary",
        "process exit"]
    claim = segments[1]
    assert (claim.start_s, claim.seconds) == (10.0, 10.5)
    assert claim.redis_cpu_s == pytest.approx(1.1025 - 0.1)  # 1.1025: interpolated at 20.5 s
    assert claim.top_commands == [("xautoclaim", 50, 5000)]
    # From the last poll at or before 10 s to the last at or before 20.5 s (20.4 s).
    assert claim.job_cpu_s == {"driver_python": 0.5, "jvm": 1.0, "python_workers": 4.0}
    assert segments[0].job_cpu_s == {"driver_python": 1.0, "jvm": 1.5}
    assert report.job_cpu_cell(claim.job_cpu_s) == "1.00 / 0.50 / 4.00"
    assert report.job_cpu_cell({"jvm": 1.0, "executor_jvm": 2.5}) == "3.50 / 0.00 / 0.00"
    assert report.job_cpu_cell({}) == "-"  # a run recorded before the column
    assert timeline.segments(lines, started, 31.0, samples)[1].job_cpu_s == {}


def _row(contender: str, size: str, messages: int, wall_s: float, runs: int = 3) -> report.Row:
    return report.Row(contender, size, messages, runs, wall_s, None, None, None, None, None,
                      None, None)


def test_marginal_rate_is_the_extra_messages_over_the_extra_wall_time() -> None:
    rows = [_row("job", "1000x1000", 1_000_000, 14.0), _row("job", "100x1000", 100_000, 9.5),
            _row("job", "2000x1000", 2_000_000, 18.0),
            _row("raw", "100x1000", 100_000, 0.7), _row("raw", "1000x1000", 1_000_000, 6.1),
            _row("naive", "100x1000", 100_000, 16.0),
            _row("naive", "1000x1000", 1_000_000, 160.0, runs=0)]  # extrapolated: left out

    found = {(m.contender, m.small, m.large): m for m in report.marginals(rows)}

    assert sorted(found) == [("job", "1000x1000", "2000x1000"), ("job", "100x1000", "1000x1000"),
                             ("raw", "100x1000", "1000x1000")]
    first = found[("job", "100x1000", "1000x1000")]
    steady = found[("job", "1000x1000", "2000x1000")]
    assert (first.msg_per_s, first.fixed_s) == (pytest.approx(200_000), pytest.approx(9.0))
    assert (steady.msg_per_s, steady.fixed_s) == (pytest.approx(250_000), pytest.approx(10.0))
    assert found[("raw", "100x1000", "1000x1000")].msg_per_s == pytest.approx(900_000 / 5.4)
    ratios = {(line[0], line[1], line[2]): line[-1] for line in report.marginal_table(rows)}
    assert ratios[("raw", "100x1000", "1000x1000")] == "1.20"  # job / raw, same sizes
    assert ratios[("job", "1000x1000", "2000x1000")] == "1.00"


GC_LOG = """\
[0.002s][info][gc] Using G1
[0.151s][info][gc] GC(0) Pause Young (Normal) (G1 Evacuation Pause) 31M->25M(380M) 7.421ms
[1.986s][info][gc] GC(9) Pause Remark 37M->37M(114M) 2.076ms
[2.100s][info][gc] GC(9) Concurrent Mark Cycle 21.257ms
[3.000s][info][gc] GC(12) Pause Full (System.gc()) 2G->1G(2G) 99.000ms
[3.100s][info][gc] GC(13) Pause Young (Normal) (G1 Evacuation Pause) 900M->512K(2G) 1.000ms
"""


def test_heap_after_gc_is_the_largest_after_value_in_any_unit() -> None:
    assert spark_log.heap_after_gc_peak(GC_LOG) == 1 << 30
    assert spark_log.heap_after_gc_peak(GC_LOG.replace("2G->1G(2G)", "2G->36M(2G)")) == 37 << 20
    assert spark_log.heap_after_gc_peak("[0.002s][info][gc] Using G1\n") is None


def test_submit_command_adds_the_gc_log_to_the_driver_java_options(tmp_path: Path) -> None:
    options = JobOptions(spark_conf=("spark.driver.extraJavaOptions=-XX:TieredStopAtLevel=1",
                                     "spark.ui.enabled=false"))
    command = submit_command(tmp_path / "bench.toml", options, tmp_path / "gc.log")

    confs = [command[i + 1] for i, arg in enumerate(command) if arg == "--conf"]
    assert confs == [f"spark.driver.extraJavaOptions=-XX:TieredStopAtLevel=1 "
                     f"-Xlog:gc:file={tmp_path / 'gc.log'}", "spark.ui.enabled=false"]
    assert driver_role(["/usr/bin/java", "-cp", "x", EXECUTOR_CLASS]) == "executor_jvm"
    assert driver_role(["/usr/bin/java", "-cp", "x", "org.apache.spark.deploy.SparkSubmit"]) \
        == "jvm"


def test_cpu_counts_each_process_once_with_its_last_reading() -> None:
    cpu = LastSeenCpu()
    cpu.record(10, "python_workers", 1.0)
    cpu.record(10, "python_workers", 2.5)  # the same worker polled again: replaces, not adds
    cpu.record(11, "python_workers", 0.5)  # a worker that ended after this reading
    cpu.record(20, "jvm", 7.0)

    assert cpu.by_kind() == {"python_workers": 3.0, "jvm": 7.0}


def test_process_tree_poll_finds_a_child_started_later_at_the_next_listing() -> None:
    """PeakRss lists the tree only every TREE_EVERY polls: a child started between listings
    is counted from the next one, with its CPU so far (cumulative, so none of it is lost)."""
    burn = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.3: pass\n" \
           f"time.sleep(30)  # {MARK}"
    poller = PeakRss(os.getpid(), lambda cmd: "child" if any(MARK in a for a in cmd) else "self")
    child = None
    try:
        assert poller.poll_once()  # the first listing: this process alone
        child = subprocess.Popen([sys.executable, "-c", burn])
        deadline = time.monotonic() + 20
        while sum(psutil.Process(child.pid).cpu_times()[:2]) < 0.25:
            assert time.monotonic() < deadline, "the child never burnt its CPU"
            time.sleep(0.05)
        for _ in range(TREE_EVERY - 1):  # polls between listings: known processes only
            poller.poll_once()
        assert "child" not in poller.cpu_s
        poller.poll_once()  # the next listing
        assert poller.cpu_s["child"] >= 0.25
        assert poller.peak["child"] > 0
    finally:
        if child is not None:
            child.kill()
            child.wait()


def test_a_process_keeps_its_role_when_its_command_line_reads_empty() -> None:
    """A process whose command line reads empty (as it exits) still counts its CPU under the
    role it had, not as ``other``."""
    seen = {"child": 0}

    def classify(cmd: list[str]) -> str | None:
        if not any(MARK in a for a in cmd):
            return "self"  # this process, and any other of its tree (servers, Spark)
        seen["child"] += 1
        return "child" if seen["child"] == 1 else None  # empty from the second reading on

    child = subprocess.Popen([sys.executable, "-c", f"import time; time.sleep(30)  # {MARK}"])
    try:
        poller = PeakRss(os.getpid(), classify)
        deadline = time.monotonic() + 20
        while "child" not in poller.cpu_s:
            assert time.monotonic() < deadline, "the child was never listed"
            poller.poll_once()
        poller.poll_once()  # the child read without a role this time
        assert seen["child"] >= 2
        assert "other" not in poller.cpu_s
        assert "child" in poller.cpu_s
    finally:
        child.kill()
        child.wait()


def _record(contender: str, size: str, wall_s: float, commands: int, cpu_s: float,
            pass_s: float | None = None) -> RunRecord:
    """A run of 1M entries; the job's log cut at the one pass's line where `pass_s` is given."""
    label = f"{targets.PASS_LABEL} in {pass_s} s" if pass_s else "dead-letter ... done"
    segments = [{"label": "1 units with pending entries", "start_s": 0.0, "seconds": 5.0},
                {"label": label, "start_s": 5.0, "seconds": pass_s or 9.0}]
    return RunRecord(contender, size, 1_000_000, 0, wall_s, None, None, 1 << 20, 1.0, None,
                     cpu_s, 0.0, commands, 0, {}, 0, 0, 0.0, 0.0, 0.0,
                     {"segments": segments} if contender != "raw" else {})


def test_issue_30_compares_the_pass_with_the_raw_loop_and_the_run_with_fewer_streams() -> None:
    records = [_record("raw", "10000x100", 9.0, 260_000, 4.0),
               _record("raw", "10000x100", 11.0, 260_000, 4.0),
               _record("job", "1000x1000", 20.0, 210_000, 4.2, pass_s=9.5),
               _record("job", "10000x100", 22.0, 288_080, 3.6, pass_s=10.5),
               _record("job", "10000x100", 22.0, 288_080, 3.6, pass_s=11.5),
               _record("job@local-cluster[2,1,1024]", "1000x1000", 30.0, 210_000, 4.2),
               _record("job@local-cluster[2,1,1024]", "10000x100", 33.0, 288_080, 3.6),
               _record("job", "1x1000000", 15.0, 200_000, 3.0, pass_s=6.0)]  # issue 49's

    lines = targets.issue_30(report.build_rows(records), records)

    assert lines == [
        "- 10000x100: job the pass 11.00 s, 1.100x the raw loop's 10.00 s (target <= 1.1x); "
        "end to end 22.0 s, 1.100x the 1000x1000 run's 20.0 s (target <= 1.2x); Redis commands "
        "and CPU per message 1.108x and 0.900x the raw loop's (targets <= 1.2x)",
        "- 10000x100: job@local-cluster[2,1,1024] the pass - s, -x the raw loop's 10.00 s "
        "(target <= 1.1x); end to end 33.0 s, 1.100x the 1000x1000 run's 30.0 s (target <= "
        "1.2x); Redis commands and CPU per message 1.108x and 0.900x the raw loop's (targets "
        "<= 1.2x)"]


def _timed(contender: str, size: str, wall_s: float, steady_s: float | None = None,
           pass_s: float | None = None, delay_ms: float = 0.0) -> RunRecord:
    """A run of `size` (the loops' own timer `steady_s`; the job's pass `pass_s`)."""
    streams, per_stream = parse_size(size)
    segments = [{"label": f"{targets.PASS_LABEL} in {pass_s} s", "start_s": 1.0,
                 "seconds": pass_s}] if pass_s else []
    return RunRecord(contender, size, streams * per_stream, 0, wall_s, steady_s, None, 1 << 20,
                     1.0, None, 1.0, 0.0, 1000, 0, {}, 0, 0, 0.0, 0.0, 0.0,
                     {"segments": segments}, handler_delay_ms=delay_ms)


def test_issue_49_with_a_slow_handler_compares_one_stream_with_the_same_entries_spread() -> None:
    records = [_timed("raw", "1x2000", 2.5, 2.0, delay_ms=1),
               _timed("raw", "8x250", 2.5, 2.0, delay_ms=1),
               _timed("job", "1x2000", 20.0, pass_s=5.0, delay_ms=1),
               _timed("job", "8x250", 19.0, pass_s=4.0, delay_ms=1),
               _timed("job", "4x500", 19.0, pass_s=5.0, delay_ms=1),
               _timed("job", "1x500", 15.0, pass_s=2.0, delay_ms=1),  # no other 500 entries
               _timed("job@local-cluster[2,1,1024]", "1x2000", 30.0, delay_ms=1),
               _timed("job@local-cluster[2,1,1024]", "8x250", 29.0, pass_s=4.0, delay_ms=1)]

    lines = targets.issue_49(report.build_rows(records), records, "local[2]")

    assert [line for line in lines if "steady" not in line] == [
        "- 1x2000 (handler 1 ms/msg): job the pass 5.00 s, 1.250x the 8x250 run's 4.00 s "
        "(target <= 1.25x)",
        "- 1x2000 (handler 1 ms/msg): job the pass 5.00 s, 1.000x the 4x500 run's 5.00 s "
        "(target <= 1.25x)",
        "- 1x2000 (handler 1 ms/msg): job@local-cluster[2,1,1024] the pass - s, -x the 8x250 "
        "run's 4.00 s (target <= 1.25x)"]
    assert "- 8x250 (handler 1 ms/msg): job steady - msg/s vs raw 1,000: -x; by the pass " \
           "(4.00 s) 500 msg/s: 0.50x (no target: beside 1x2000's)" in lines  # no probe runs


def test_issue_49_without_a_delay_compares_one_stream_with_the_raw_loop_per_master() -> None:
    records = [_timed("raw", "1x1000000", 9.0, 8.0), _timed("raw", "1000x1000", 9.0, 8.0),
               _timed("job", "1x1000000", 20.0, pass_s=6.4),
               _timed("job-startup", "1x1000000", 10.0),
               _timed("job", "1000x1000", 18.0), _timed("job-startup", "1000x1000", 10.0),
               _timed("job@local-cluster[2,1,1024]", "1x1000000", 25.0, pass_s=10.0),
               _timed("job-startup@local-cluster[2,1,1024]", "1x1000000", 17.0)]

    lines = targets.issue_49(report.build_rows(records), records, "local[2]")

    assert lines == [
        "- 1x1000000 (no handler delay): job on local[2] steady 100,000 msg/s vs raw 125,000: "
        "0.80x; by the pass (6.40 s) 156,250 msg/s: 1.25x (target at 1x1000000: >= 1.3x on "
        "local[2])",
        "- 1000x1000 (no handler delay): job steady 125,000 msg/s vs raw 125,000: 1.00x; by "
        "the pass (- s) - msg/s: -x (no target: beside 1x1000000's)",
        "- 1x1000000 (no handler delay): job@local-cluster[2,1,1024] on "
        "local-cluster[2,1,1024] steady 125,000 msg/s vs raw 125,000: 1.00x; by the pass "
        "(10.00 s) 100,000 msg/s: 0.80x (target at 1x1000000: >= 1.0x on "
        "local-cluster[2,1,1024])"]


def test_the_slow_handler_takes_its_delay_from_the_environment_or_fails(
        monkeypatch: pytest.MonkeyPatch) -> None:
    message = Message("s", "g", "1-0", [(b"k", b"v")], 1)
    monkeypatch.delenv(handlers.DELAY_ENV, raising=False)
    assert handlers.from_environment() is noop
    with pytest.raises(RuntimeError, match=handlers.DELAY_ENV):
        handlers.slow_service([message])  # its batch fails: the run's verification fails
    monkeypatch.setenv(handlers.DELAY_ENV, "20")
    started = time.perf_counter()
    assert handlers.slow_service([message] * 3) == [True] * 3
    assert time.perf_counter() - started >= 0.06
    assert handlers.from_environment() is handlers.slow_service
    # an inherited value never slows a run without a delay down
    assert handlers.DELAY_ENV not in handlers.handler_env(os.environ, 0)
    assert handlers.handler_env({}, 2.5) == {handlers.DELAY_ENV: "2.5"}


def test_a_slow_handler_job_names_it_and_gives_executors_its_delay(tmp_path: Path) -> None:
    spec = BacklogSpec(streams=1, per_stream=200)
    slow = config_text(spec, "redis://127.0.0.1:1/0", tmp_path, handler_delay_ms=1)
    assert 'path = "tests.benchmark.handlers:slow_service"' in slow
    assert 'path = "recovery.handlers:noop"' in config_text(spec, "redis://x:1/0", tmp_path)

    command = submit_command(tmp_path / "bench.toml", JobOptions(handler_delay_ms=1.5))
    assert f"spark.executorEnv.{handlers.DELAY_ENV}=1.5" in command
    assert not any("executorEnv" in arg for arg in submit_command(tmp_path / "b.toml",
                                                                  JobOptions()))
    args = parse_args(["--sizes", "1x200"])
    assert args.handler_delay_ms == 0
    assert "1x1000000" in parse_args([]).sizes.split(",")
    with pytest.raises(SystemExit):
        parse_args(["--handler-delay-ms", "-1"])
