"""Spark task failures (``local[2,3]`` retries, executors of their own through spark-submit, a one
pass without retries, a claim journal gone mid-run): nothing lost, nothing left unreported.

Every fault here is proven to have happened, or the test fails; after each, Redis itself is
checked: every seeded entry is exactly one of acked, in its dead-letter stream exactly once,
still pending, or deleted upstream; and the reports account for what happened (the injected task
failure fired: its marker, ``assert_fired``).
"""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession
from redis import Redis

from tests.support.fault_checks import (
    SMALL_BATCHES,
    TRIAL_KINDS,
    check_accounting,
    check_states,
    rerun_and_account,
)
from tests.support.fault_tools import (
    BACKOFF,
    SPLIT,
    WAITING_KIND,
    JobResult,
    Key,
    assert_fired,
    finished,
    handed_over,
    job_args,
    planned,
    report_rows,
    rows_by_key,
    run_in_process,
    seed_kinds,
    write_control,
)
from tests.support.handlers import HANDLED
from tests.support.servers import REDIS_VERSIONS

pytestmark = pytest.mark.slow  # kills, restarts and spark-submit runs


# The fault combinations: (faults asked, schedule, plan, split) by id.
COMBOS: dict[str, tuple[tuple[str, ...], tuple[str, ...], bool, tuple[str, ...]]] = {
    "claim": (("claim 2 0",), (), False, ()),
    "apply": (("apply 1 0", "apply 2 1"), (), False, ()),
    "claim-apply-backoff": (("claim 2 0", "apply 2 1"), BACKOFF, False, ()),
    "claim-plan": (("claim 2 0",), (), True, ()),
    "apply-plan": (("apply 1 0", "apply 2 1"), (), True, ()),
    "claim-apply-split": (("claim 2 0", "apply 2 1"), (), False, SPLIT),
    "claim-apply-backoff-split": (("claim 2 0", "apply 2 1"), BACKOFF, False, SPLIT),
}
JOURNALS = {"journaled": "recovery:journal:", "materialised": ""}


def _retry_cases() -> list[Any]:
    """Every combination in both paths, each on one of the two Redis versions whose replies
    differ most (REDIS_VERSIONS), in turn: each combination meets Redis 7.0 in one path and
    6.2 in the other, and each path meets both versions. Valkey answers as Redis 7.2 does
    (tests/support/servers.py); the per-server tests cover its reply shapes."""
    cases = []
    for i, (combo, (asked, schedule, plan, split)) in enumerate(COMBOS.items()):
        for j, (path, journal) in enumerate(JOURNALS.items()):
            flavor = REDIS_VERSIONS[(i + j) % len(REDIS_VERSIONS)]
            cases.append(pytest.param(flavor, asked, journal, schedule, plan, split,
                                      id=f"{flavor}-{combo}-{path}"))
    return cases


@pytest.mark.parametrize(("server", "faults_asked", "journal", "schedule", "plan", "split"),
                         _retry_cases(), indirect=["server"])
def test_task_failures_lose_nothing_and_leave_nothing_unreported(
        spark, server, tmp_path, faults, small_batches, caplog, faults_asked, journal,
        schedule, plan, split):
    """Under a backoff schedule the retried attempt sees its failed attempt's claims
    delivered twice (not due for anyone else): it must take them back all the same, and
    count only the entries really not due. `plan`: the run applies a dry run's plan (claims
    by ID), made just before. `split`: each stream is claimed by two parts through a shared
    cursor; a retried part's earlier claims lie outside its own steps' ranges."""
    client = server.client()
    streams = ["e-a", "e-b{x}"]
    seeded = seed_kinds(client, streams, {**TRIAL_KINDS, **(WAITING_KIND if schedule else {})})
    write_control(server.url)
    settings = ["claim.count=5", "handler.batch_size=4", f"claim.journal_prefix={journal}",
                *schedule, *split]
    plan_args = planned(spark, server.url, tmp_path, streams, *settings) if plan else []
    asked = faults_asked if journal else _in_stages_of_their_own(faults_asked)
    for line in asked:
        faults(line)
    result = run_in_process(spark, [*job_args(server.url, tmp_path, streams, *settings,
                                              run_id="retried"), *plan_args])
    assert_fired(*asked)
    check_retried_run(spark, client, seeded, tmp_path, result)
    waiting = [k for k, kind in seeded.items() if kind == "waiting"]
    assert result.summary["not_due"] == len(waiting)
    for unit in result.summary["units"]:
        assert unit.get("not_due", 0) == (5 if schedule else 0), unit
    if split:
        assert "2 streams split over several tasks" in caplog.text, "the streams were not split"


def _in_stages_of_their_own(asked: tuple[str, ...]) -> tuple[str, ...]:
    """Fault lines for the materialised path, where the claim and the hand-over are Spark
    stages of their own, each counting its tasks' attempts from 0: an apply fault asked of
    the attempt after the claim faults (one pass) is asked of the apply stage's attempt
    that many fewer (else it would never fire)."""
    claim_faults = sum(1 for line in asked if line.startswith("claim "))
    shifted = []
    for line in asked:
        stage, step, attempt = line.split()
        if stage == "apply":
            line = f"{stage} {step} {int(attempt) - claim_faults}"
        shifted.append(line)
    return tuple(shifted)


@pytest.mark.timeout(420)
def test_task_failures_on_executors_of_their_own_through_spark_submit(
        spark, redis_server, tmp_path, faults, submit):
    """local-cluster[2,1,1024] (executors of their own, failed tasks retried), the journaled
    one pass: every task's first attempt fails after its 2nd claim step (two steps handed
    over and journaled), its second after its 2nd hand-over's side effects (before their
    outcome is journaled); the third reads both attempts' journal."""
    client = redis_server.client()
    streams = ["x-a", "x-b{x}", "x-c"]
    seeded = seed_kinds(client, streams, TRIAL_KINDS)
    write_control(redis_server.url)
    faults("claim 2 0")
    faults("apply 2 1")
    logs = tmp_path / "logs"
    result = finished(submit(job_args(redis_server.url, tmp_path, streams, "claim.count=5",
                                      "handler.batch_size=4", run_id="retried"), logs,
                             SMALL_BATCHES, master="local-cluster[2,1,1024]"),
                      logs, timeout_s=360)
    assert "journaled" in result.stderr, "not the journaled one pass"
    assert result.stderr.count("injected fault") >= 2, "the faults did not fire"
    assert_fired("claim 2 0", "apply 2 1")
    check_retried_run(spark, client, seeded, tmp_path, result)
    assert client.keys("recovery:journal:*") == []
    # The second attempts finished two hand-overs of 20 rows each (SMALL_BATCHES) and
    # recorded only the first: the third reports those rows as recorded, and only the
    # unrecorded hand-over's as skipped (at most 20 rows per task, one task per stream).
    rows = report_rows(spark, tmp_path, "retried")
    skipped = [r for r in rows if r["action"] == "skipped"]
    assert len(skipped) <= 20 * len(streams), len(skipped)


def test_a_journal_gone_mid_run_fails_the_run_in_one_line_and_loses_nothing(
        spark, redis_server, tmp_path, faults, small_batches):
    """The handler's first call deletes the run's claim journals (as an evicting Redis might);
    the task then fails after a hand-over, and its retry finds no journal: it stops rather
    than leave what the failed attempt did unreported. Exit 1, one line naming the journal;
    in Redis every entry is where it belongs, and a rerun finishes the work."""
    client = redis_server.client()
    streams = ["j-a", "j-b"]
    seeded = seed_kinds(client, streams)
    journals = [f"recovery:journal:recovery-gone-{part}" for part in range(2)]
    write_control(redis_server.url, on_first_call=[["DEL", *journals]])
    faults("apply 2 0")
    result = run_in_process(spark, job_args(redis_server.url, tmp_path, streams,
                                            "claim.count=5", "handler.batch_size=4",
                                            "spark.partitions=2", run_id="gone"))
    assert_fired("apply 2 0")
    assert result.code == 1, result.stderr
    (line,) = result.error_lines()
    assert "claim journal recovery:journal:recovery-gone-" in line and "is gone" in line, line
    time.sleep(0.1)
    write_control(redis_server.url)
    rerun = run_in_process(spark, job_args(redis_server.url, tmp_path, streams,
                                           "claim.min_idle_ms=50", run_id="rerun"))
    assert rerun.code == 0, rerun.stderr
    check_states(client, seeded, "rerun")


def check_retried_run(spark: SparkSession, client: Redis, seeded: dict[Key, str],
                      reports: Path, result: JobResult) -> None:
    """A run whose tasks failed and were retried: exit 0, each entry where it belongs in
    Redis and in the report once, each acked entry handed over once, the summary's totals
    those of the rows written (not a failed attempt's as well)."""
    assert result.code == 0, result.stderr[-3000:]
    states = check_states(client, seeded, "retried")
    rows = rows_by_key(report_rows(spark, reports, "retried"))
    handed = handed_over(client)
    for key, kind in seeded.items():
        if kind == "waiting":
            assert key not in rows, (key, "not due, yet reported")
        elif kind != "deleted":  # see _account: the failed claim attempt may have dropped it
            assert len(rows.get(key, [])) == 1, (key, rows.get(key))
        if kind == "ok":
            assert handed[key] == 1, f"{key}: an acked entry was handed over again"
    written = Counter(r["action"] for v in rows.values() for r in v)
    assert {a: n for a, n in result.summary["totals"].items() if n} == dict(written)
    check_accounting(client, seeded, states, {"retried": [r for v in rows.values() for r in v]},
                     set())


# One pass: "claim 2 0" fires then too. On the two Redis versions (REDIS_VERSIONS): Valkey
# answers as Redis 7.2 does, and the in-process cases above meet both versions too.
@pytest.mark.parametrize("fault", ["apply 2 0"])
@pytest.mark.parametrize("server", REDIS_VERSIONS, indirect=True)
def test_one_pass_task_failure_fails_the_run_and_a_rerun_loses_nothing(
        spark, server, tmp_path, faults, submit, fault):
    """local[2] (spark-submit): no task is retried, so the job claims and hands over in one
    pass. A task that fails there (after its step's hand-over: the worst moment) fails the
    run (exit 1, no report); what it claimed and did not finish stays pending on its
    consumer, and the next run finishes the work. The accounting finds every entry the
    failed run did in Redis and the handler's record."""
    client = server.client()
    streams = ["p-a", "p-b{x}"]
    seeded = seed_kinds(client, streams, TRIAL_KINDS)
    write_control(server.url)
    faults(fault)
    logs = tmp_path / "logs"
    failed = finished(submit(job_args(server.url, tmp_path, streams, "claim.count=5",
                                      "claim.min_idle_ms=500", "handler.batch_size=4",
                                      run_id="failed"), logs, SMALL_BATCHES),
                      logs, timeout_s=240)
    assert_fired(fault)  # the injected failure, not something else, failed the run
    assert failed.code == 1, failed.stderr[-3000:]
    assert "one pass" in failed.stderr, "the run did not take the one-pass path"
    assert client.hlen(HANDLED) > 0, "the failed run handed nothing over before its fault"
    time.sleep(0.6)  # what it still holds becomes idle enough (min_idle_ms 500)
    reports = rerun_and_account(spark, server.url, tmp_path, streams, seeded, 500,
                                ("failed", True), "rerun")
    assert "failed" not in reports
