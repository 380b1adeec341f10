"""Real faults in real processes: SIGKILL of spark-submit, a Redis restart, two runs at once,
live consumers acking meanwhile, Spark task failures. After each, Redis itself is checked:
every seeded entry is exactly one of acked, in its dead-letter stream exactly once, still
pending, or deleted upstream; and the reports account for what happened.

``RECOVERY_KILL_TRIALS`` (default 3) sets the number of kill trials, ``RECOVERY_KILL_SEED``
their random seed; each trial whose kill landed prints one line (``pytest -s`` shows them).
Every fault here is proven to have happened, or the test fails: the kill landed mid-work
(exit -9, its moment seen in Redis, work left), the injected task failure fired (its
marker, ``assert_fired``), Redis went down while the run was in flight.
"""

from __future__ import annotations

import os
import random
import socket
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession
from redis import Redis

from recovery.executor.handover.lease import LEASE_FRESH_S
from recovery.testing.local_redis import LocalServer, free_port
from tests.support.backlogs import DEAD, HOUR_MS, age_pending
from tests.support.fault_tools import (
    BACKOFF,
    GROUP,
    KINDS,
    REJECTED_KIND,
    SPLIT,
    WAITING_KIND,
    JobResult,
    Key,
    assert_fired,
    dead_letter_index,
    dead_letter_total,
    finished,
    handed_over,
    job_args,
    job_consumers,
    job_owned,
    key_of,
    kill_landed,
    kill_tree,
    owned_by,
    planned,
    report_rows,
    rows_by_key,
    run_in_process,
    seed_kinds,
    spark_submit,
    wait_until,
    write_control,
)
from tests.support.handlers import HANDLED, LIVE_ACKED, VIOLATIONS, entry_key
from tests.support.invariants import final_states, pel
from tests.support.servers import FLAVORS, start_server

pytestmark = pytest.mark.slow  # kills, restarts and spark-submit runs, minutes in all

KILL_TRIALS = int(os.environ.get("RECOVERY_KILL_TRIALS", "3"))
KILL_SEED = int(os.environ.get("RECOVERY_KILL_SEED", "4"))
KILL_ATTEMPTS = 3  # per trial: a kill that misses its moment is tried again, earlier
STAGES = ("claim", "dead_letter", "report", "handler")
# One pass without task retries, then the journaled one pass (tasks may be retried), in turn.
KILL_MASTERS = ("local[2]", "local[2,2]")
SMALL_BATCHES = "spark.sql.execution.arrow.maxRecordsPerBatch=20"
TRIAL_KINDS = {**KINDS, **REJECTED_KIND}  # what the kill and task-failure trials seed
PER_STREAM = {kind: count for kind, (count, _) in TRIAL_KINDS.items()}


@pytest.fixture
def submit() -> Iterator[Callable[..., subprocess.Popen[bytes]]]:
    """spark_submit, and SIGKILL of whatever is still running when the test ends (a failed
    assertion or pytest-timeout must not leave a job behind)."""
    started: list[subprocess.Popen[bytes]] = []

    def _submit(*args: Any, **kwargs: Any) -> subprocess.Popen[bytes]:
        started.append(spark_submit(*args, **kwargs))
        return started[-1]

    yield _submit
    for proc in started:
        if proc.poll() is None:
            kill_tree(proc)


@pytest.fixture
def small_batches(spark: SparkSession) -> Iterator[None]:
    """Apply works in Arrow batches of 20 rows, so a run has many steps to fail between."""
    key, value = SMALL_BATCHES.split("=")
    spark.conf.set(key, value)
    yield
    spark.conf.unset(key)


# --- what must hold after any fault, then a run that finished -------------------------------

def check_states(client: Redis, seeded: dict[Key, str], last_run: str) -> dict[Key, str]:
    """Each entry's place in Redis fits its kind; returns the states."""
    states = final_states(client, seeded)  # also: never dead-lettered twice, never both
    handed = handed_over(client)
    for key, kind in seeded.items():
        state = states[key]
        if kind == "ok":
            assert state == "acked" and handed[key] >= 1, (key, state, handed[key])
        elif kind in ("poison", "fail_at_limit", "rejected"):
            assert state == "dead_lettered", (key, kind, state)
            assert kind != "rejected" or handed[key] >= 1, (key, "rejected unhandled")
        elif kind == "fail":
            assert state.startswith(f"pending:recovery-{last_run}-"), (key, state)
        elif kind == "deleted":
            assert state == "acked", (key, state)  # gone from the PEL, not in the DLQ
        elif kind == "waiting":  # not due under the schedule: left to its owner as it was
            assert state == f"pending:{DEAD}", (key, state)
            assert pel(client, key[0], key[1])[key[2]].delivery_count == WAITING_KIND[kind][1]
        if kind in ("poison", "deleted", "waiting"):
            assert handed[key] == 0, f"{key} ({kind}) was handed to the handler"
    return states


def check_accounting(client: Redis, seeded: dict[Key, str], states: dict[Key, str],
                     reports: dict[str, list[dict[str, Any]]], unreported_ok: set[str]
                     ) -> dict[str, int]:
    """The readable reports, the dead-letter metadata and the handler's record together
    account for every entry; no report row contradicts Redis.

    `unreported_ok`: runs whose report may be missing rows (killed or failed runs: Spark
    commits a report only when the run succeeds). Returns counts of how entries are
    accounted for.
    """
    letters = dead_letter_index(client, {k[0] for k in seeded})
    handed = handed_over(client)
    index = {run: rows_by_key(rows) for run, rows in reports.items()}
    tally: dict[str, int] = {}
    for key, kind in seeded.items():
        rows = [(run, r) for run, by_key in index.items() for r in by_key.get(key, [])]
        for run in reports:
            assert len(index[run].get(key, [])) <= 1, f"{run} reported {key} twice"
        how = _account(key, kind, states[key], rows, letters, handed, unreported_ok)
        tally[how] = tally.get(how, 0) + 1
    return tally


def _account(key: Key, kind: str, state: str, rows: list[tuple[str, dict[str, Any]]],
             letters: dict[Key, tuple[str, dict]], handed: Any, unreported_ok: set[str]) -> str:
    actions = {r["action"] for _, r in rows}
    for run, row in rows:  # what a report says happened did happen
        if row["action"] == "reprocessed":
            assert state == "acked", (key, run, state)
        elif row["action"] == "dead_lettered":
            assert letters[key][0] == row["dead_letter_id"], (key, run)
        elif row["action"] == "deleted":
            assert kind == "deleted", (key, run, kind)
    if kind == "waiting":
        assert not rows, (key, "not due, yet reported", rows)
        return "not due, left pending"
    if kind == "deleted":
        # A killed or failed attempt whose XAUTOCLAIM (7.0+) dropped the entry from the PEL
        # took the only evidence with it: a later run cannot report it (known limitation).
        return "reported deleted" if actions == {"deleted"} else "deleted, unreported"
    if state == "dead_lettered":
        run = letters[key][1][b"x-run-id"].decode()
        reason = letters[key][1][b"x-death-reason"]
        assert (reason == b"handler-rejected") == (kind == "rejected"), (key, kind, reason)
        if "dead_lettered" in actions:
            return "reported dead-lettered"
        # An earlier attempt of a retried task moved it; the attempt that counts found it
        # gone. Or a run without a committed report moved it: the dead letter names it.
        if any(r["action"] == "skipped" for r_run, r in rows if r_run == run):
            return "dead-lettered by an earlier task attempt, reported skipped"
        assert run in unreported_ok, f"{key} dead-lettered by {run}, unreported"
        return "dead letter names its unreported run"
    if state == "acked":
        if "reprocessed" in actions:
            return "reported reprocessed"
        # Acked by an earlier task attempt (the retry reports it skipped), or by a run
        # without a committed report; either way only after the handler had it.
        assert handed[key] >= 1, f"{key} acked but never handed over"
        if "skipped" in actions:
            return "acked by an earlier task attempt, reported skipped"
        assert unreported_ok, (key, actions)
        return "acked by an unreported run (handler record)"
    assert "failed" in actions, (key, state, actions)
    return "reported failed, still pending"


def rerun_and_account(spark: SparkSession, url: str, base: Path, streams: list[str],
                      seeded: dict[Key, str], min_idle_ms: int, first: tuple[str, bool],
                      rerun_id: str) -> dict[str, list[dict[str, Any]]]:
    """Run again in-process (claiming what is idle for `min_idle_ms`), which must finish;
    then Redis, the handler's record and the reports of both runs must account for every
    entry. `first`: the earlier run's id and whether its report may be missing rows.
    Returns the reports that could be read."""
    rerun = run_in_process(spark, job_args(url, base, streams, f"claim.min_idle_ms={min_idle_ms}",
                                           run_id=rerun_id))
    assert rerun.code == 0, rerun.stderr
    client = Redis.from_url(url)
    states = check_states(client, seeded, rerun_id)
    reports = {r: rows for r in (first[0], rerun_id)
               if (rows := report_rows(spark, base, r)) is not None}
    check_accounting(client, seeded, states, reports, {first[0]} if first[1] else set())
    client.close()
    return reports


# --- (a) SIGKILL at seeded random moments ----------------------------------------------------

def _side_effect_totals(streams: list[str]) -> tuple[int, int, int]:
    """(entries due to claim, hand-overs, dead letters) a finished run of `streams` makes."""
    claimable = sum(n for k, n in PER_STREAM.items() if k != "deleted") * len(streams)
    handed = sum(PER_STREAM[k] for k in ("ok", "fail", "fail_at_limit", "rejected")) * len(streams)
    letters = sum(PER_STREAM[k] for k in ("poison", "fail_at_limit", "rejected")) * len(streams)
    return claimable, handed, letters


def _kill_moment(stage: str, streams: list[str], rng: random.Random) -> int:
    """Where a trial's first attempt kills: after that many of its stage's side effects
    (claims, dead letters, hand-overs), or (stage ``report``) that many ms after the last."""
    claimable, handed, letters = _side_effect_totals(streams)
    if stage == "report":
        return int(rng.uniform(0, 2000))
    return rng.randint(1, {"claim": claimable, "dead_letter": letters, "handler": handed}[stage]
                       - 1)


def _kill_condition(stage: str, client: Redis, streams: list[str], run_id: str, n: int,
                    plan: bool = False) -> tuple[Callable[[], bool], str]:
    """When to kill (read in Redis) and what that moment is, for `n` of _kill_moment."""
    claimable, handed, letters = _side_effect_totals(streams)
    if stage == "claim":
        if plan:  # claimed so far: what the dead consumer no longer owns (deleted ones stay)
            total = sum(PER_STREAM.values()) * len(streams)
            return ((lambda: total - owned_by(client, streams, DEAD) >= n),
                    f"{n}/{claimable} claimed")
        return (lambda: job_owned(client, streams, run_id) >= n), f"{n}/{claimable} claimed"
    if stage == "dead_letter":
        return (lambda: dead_letter_total(client, streams) >= n), f"{n}/{letters} dead letters"
    if stage == "handler":
        return (lambda: client.hlen(HANDLED) >= n), f"{n}/{handed} handed over"
    return (lambda: _side_effects(client, streams)[0]), f"all side effects done, then {n} ms"


def _side_effects(client: Redis, streams: list[str]) -> tuple[bool, str]:
    """Whether every hand-over and dead letter of a finished run is in Redis, and how many."""
    _, handed, letters = _side_effect_totals(streams)
    now_handed, now_letters = client.hlen(HANDLED), dead_letter_total(client, streams)
    return (now_handed >= handed and now_letters >= letters,
            f"{now_handed}/{handed} handed over, {now_letters}/{letters} dead letters")


@dataclass
class KillAttempt:
    """One spark-submit run killed at a moment. `landed`: the moment aimed at was seen in
    Redis, the job was still running and died of this SIGKILL (exit -9), and Redis shows it
    had done part of its work, not all: side effects left to do (stage ``report``: every
    side effect done, the run itself not over). `at_kill`: Redis' count at the kill."""

    streams: list[str]
    seeded: dict[Key, str]
    killed: str
    plan_args: list[str]
    aimed: str
    landed: bool
    at_kill: str


def _kill_attempt(spark: SparkSession, server: LocalServer, base: Path, trial: int,
                  attempt: int, stage: str, n: int, submit: Callable[..., Any],
                  schedule: tuple[str, ...], plan: bool) -> KillAttempt:
    """Seed streams of this attempt's own, start the job (with `plan`, applying a dry run's
    plan) and SIGKILL it at `n` (_kill_condition)."""
    client = server.client()
    client.delete(HANDLED)
    streams = [f"k{trial}.{attempt}-a", f"k{trial}.{attempt}-b{{t}}"]
    seeded = seed_kinds(client, streams, {**TRIAL_KINDS, **(WAITING_KIND if schedule else {})})
    write_control(server.url, delay_s=0.12)
    killed = f"killed{trial}-{attempt}"
    # Odd trials split each stream over two parts (a shared cursor), the others keep it whole.
    slow = ["claim.min_idle_ms=1000", "claim.count=5", "claim.max_entries_per_s=40",
            "handler.batch_size=4", *schedule, *(SPLIT if trial % 2 else ())]
    plan_args = planned(spark, server.url, base, streams, *slow) if plan else []
    proc = submit([*job_args(server.url, base, streams, *slow, run_id=killed), *plan_args],
                  base / f"logs-{trial}-{attempt}", SMALL_BATCHES,
                  master=KILL_MASTERS[trial % len(KILL_MASTERS)])
    condition, aimed = _kill_condition(stage, client, streams, killed, n, plan)
    reached = wait_until(condition, proc, 180, aimed)
    if reached and stage == "report":
        time.sleep(n / 1000)
    by_this_kill = kill_landed(proc)
    all_done, at_kill = _side_effects(client, streams)
    write_control(server.url, delay_s=0)
    landed = reached and by_this_kill and all_done == (stage == "report")
    client.close()
    return KillAttempt(streams, seeded, killed, plan_args, aimed, landed, at_kill)


def _kill_trial(spark: SparkSession, server: LocalServer, base: Path, trial: int,
                stage: str, rng: random.Random, submit: Callable[..., Any],
                schedule: tuple[str, ...], plan: bool = False) -> tuple[str | None, list[str]]:
    """Kill a run at a seeded random moment of `stage`, then re-run until one finishes and
    account for every entry. A kill that misses (the job got past the moment, or ended,
    before it) is tried again, on fresh streams, at an earlier moment: half as far (a
    quarter of the wait, stage ``report``), up to KILL_ATTEMPTS in all. Returns the
    trial's line (None when no attempt's kill landed) and the missed attempts."""
    first = _kill_moment(stage, [f"k{trial}-a", f"k{trial}-b"], rng)
    missed = []
    for attempt in range(KILL_ATTEMPTS):
        n = first // 4 ** attempt if stage == "report" else max(1, first >> attempt)
        run = _kill_attempt(spark, server, base, trial, attempt, stage, n, submit, schedule,
                            plan)
        if run.landed:
            return _rerun_after_kill(spark, server, base, (trial, stage), run, schedule,
                                     missed), missed
        missed.append(f"aimed at {run.aimed}, missed ({run.at_kill} at the kill)")
    return None, missed


def _rerun_after_kill(spark: SparkSession, server: LocalServer, base: Path,
                      trial_stage: tuple[int, str], run: KillAttempt,
                      schedule: tuple[str, ...], missed: list[str]) -> str:
    """Re-run (up to 3 times) until a run finishes, then check Redis and the reports;
    returns the trial's line."""
    trial, stage = trial_stage
    client = server.client()
    streams, seeded, killed = run.streams, run.seeded, run.killed
    time.sleep(1.1)  # the killed run's claims become idle enough (min_idle_ms 1000)
    reruns = []
    for attempt in range(3):
        reruns.append(f"rerun{trial}-{attempt}")
        result = run_in_process(spark, [*job_args(server.url, base, streams,
                                                  "claim.min_idle_ms=1000", *schedule,
                                                  run_id=reruns[-1]), *run.plan_args])
        if result.code == 0:
            break
    assert result.code == 0, result.stderr
    if schedule and _age_what_the_killed_run_left(client, seeded, killed):
        reruns.append(f"rerun{trial}-due")
        # Idle 10 s: the aged entries (an hour) and the waiting ones (2 min) are examined, the
        # re-runs' own failures (idle a second or two on a slow machine) are not, so the
        # not-due count is the waiting seeds alone.
        result = run_in_process(spark, job_args(server.url, base, streams,
                                                "claim.min_idle_ms=10000", *schedule,
                                                run_id=reruns[-1]))
        assert result.code == 0, result.stderr
    # Under a schedule a re-run's failed entries wait for their next due time with it, so
    # they may stay with an earlier re-run than the last.
    states = check_states(client, seeded, f"rerun{trial}" if schedule else reruns[-1])
    assert result.summary["not_due"] == (5 * len(streams) if schedule else 0)
    reports = {r: rows for r in [killed, *reruns]
               if (rows := report_rows(spark, base, r)) is not None}
    tally = check_accounting(client, seeded, states, reports, {killed})
    for stream in streams:
        assert not [c for c in job_consumers(client, stream) if killed in c], \
            "the killed run's emptied consumers are removed by the re-run"
    client.close()
    master = KILL_MASTERS[trial % len(KILL_MASTERS)]
    return (f"trial {trial} {master} stage={stage}: killed at {run.aimed} ({run.at_kill})"
            f"{f' after {len(missed)} missed attempt(s)' if missed else ''}; "
            f"{len(reruns)} re-run(s); "
            f"killed run's report {'readable' if killed in reports else 'lost'}; "
            f"{sorted(tally.items())}")


def _age_what_the_killed_run_left(client: Redis, seeded: dict[Key, str], killed: str) -> int:
    """Under a schedule, the killed run's claim was a delivery: what it claimed and did not
    finish is not due for the re-run (delivered once more, idle seconds), and stays with
    its consumer, untouched. Check that, then age those entries an hour (owner and count
    kept), so that the next run finds them due. Returns how many."""
    left = [k for k, state in final_states(client, seeded).items()
            if state.startswith(f"pending:recovery-{killed}-")]
    for stream, group, entry_id in left:
        kind = seeded[(stream, group, entry_id)]
        assert kind != "waiting", (entry_id, "the killed run claimed an entry not due")
        count = pel(client, stream, group)[entry_id].delivery_count
        assert count == TRIAL_KINDS[kind][1] + 1, (entry_id, kind, count)
    for stream in {k[0] for k in left}:
        age_pending(client, stream, GROUP, [i for s, _, i in left if s == stream], HOUR_MS)
    return len(left)


@pytest.mark.timeout(120 + 240 * KILL_TRIALS)
@pytest.mark.parametrize(("schedule", "plan"), [((), False), (BACKOFF, False), ((), True)],
                         ids=["xautoclaim", "backoff", "plan"])
def test_sigkill_at_random_moments_then_rerun_loses_nothing(spark, tmp_path, submit, schedule,
                                                           plan):
    """The trials take the servers in turn (Redis 7.0, Valkey 8.1, Redis 6.2, ...), each on a
    fresh one: with the default three trials, one per server at the cost of one server.
    Under a backoff schedule (killed run and re-runs alike), entries not due stay with
    their owner throughout, and what the killed run claimed waits as delivered once more.
    `plan`: the killed run and its re-runs apply a dry run's plan (claims by ID).
    Only trials whose kill landed count (see _kill_trial); one whose every attempt missed
    fails the test."""
    rng = random.Random(KILL_SEED)
    landed, missed = [], []
    for trial in range(KILL_TRIALS):
        stage = STAGES[trial] if trial < len(STAGES) else rng.choice(STAGES)
        flavor = FLAVORS[trial % len(FLAVORS)]
        with start_server(flavor) as server:
            line, misses = _kill_trial(spark, server, tmp_path / "reports", trial, stage, rng,
                                       submit, schedule, plan)
        if line is None:
            missed.append(f"{flavor} trial {trial} stage={stage}: {misses}")
            continue
        landed.append(f"{flavor} {line}")
        print(landed[-1], flush=True)
    assert len(landed) == KILL_TRIALS, \
        f"no kill landed in {KILL_ATTEMPTS} attempts: {missed} (landed: {len(landed)})"


# --- (b) Redis restarts mid-run; Redis unreachable at start ---------------------------------

@pytest.fixture
def aof_server(request: pytest.FixtureRequest) -> Iterator[LocalServer]:
    srv = start_server(request.param, "--appendonly", "yes", "--appendfsync", "always")
    yield srv
    srv.stop()


@pytest.mark.parametrize(("aof_server", "down_s"),
                         [("redis", 1.5), ("redis62", 1.5), ("redis", 8.0)],
                         indirect=["aof_server"])
def test_redis_restart_mid_run_then_rerun_loses_nothing(spark, aof_server, tmp_path,
                                                        small_batches, down_s):
    """Redis is SIGKILLed mid-run and started again on the same AOF after `down_s`: 1.5 s
    may be bridged by the client's retries and Spark's task retries; 8 s is not (how long
    the job waits is the client's, not the server's: that case runs on 7.0 only)."""
    client = aof_server.client()
    streams = ["r-a", "r-b"]
    seeded = seed_kinds(client, streams)
    write_control(aof_server.url, delay_s=0.1)
    args = job_args(aof_server.url, tmp_path, streams, "claim.min_idle_ms=1000",
                    "handler.batch_size=4", run_id="restarted")
    outcome: dict[str, Any] = {}
    job = threading.Thread(target=lambda: outcome.update(r=run_in_process(spark, args)))
    job.start()
    wait_until(lambda: client.hlen(HANDLED) >= 12, None, 120, "12 hand-overs")
    handed_at_kill = client.hlen(HANDLED)
    aof_server.kill()
    # The fault landed mid-run: hand-overs were left, and the job outlived the server (what
    # is left of a run, its consumers' clean-up included, needs Redis).
    in_flight = job.is_alive()
    time.sleep(down_s)
    aof_server.start()
    job.join(120)
    assert not job.is_alive()
    _, handed_total, _ = _side_effect_totals(streams)
    assert in_flight and handed_at_kill < handed_total, \
        ("Redis restarted after the run, not during it", in_flight, handed_at_kill)
    first = outcome["r"]
    print(f"run during the restart (killed at {handed_at_kill}/{handed_total} hand-overs): "
          f"exit {first.code} {first.error_lines()}", flush=True)
    assert first.code in ((0, 1) if down_s < 5 else (1,))
    if first.code == 1:
        assert len(first.error_lines()) == 1, first.stderr
        assert "Redis at 127.0.0.1" in first.error_lines()[0], first.stderr
        assert first.summary["exit_code"] == 1
    time.sleep(1.1)
    write_control(aof_server.url, delay_s=0)
    rerun_and_account(spark, aof_server.url, tmp_path, streams, seeded, 1000,
                      ("restarted", first.code != 0), "after-restart")


def test_unreachable_redis_fails_fast_with_one_line(tmp_path, submit):
    """A real spark-submit: exit 1, one ``error:`` line naming the address (on stdout: see
    fault_tools.finished), then the JSON summary as the last line of stdout."""
    port = free_port()
    logs = tmp_path / "logs"
    started = time.monotonic()
    proc = submit(job_args(f"redis://127.0.0.1:{port}/0", tmp_path, ["orders"]), logs)
    result = finished(proc, logs, timeout_s=120)
    elapsed = time.monotonic() - started
    assert result.code == 1
    assert elapsed < 30, f"took {elapsed:.1f} s"
    (line,) = result.error_lines()
    assert f"cannot reach Redis at 127.0.0.1:{port}" in line and "check redis.url" in line
    assert result.summary == {"status": "error", "exit_code": 1, "error": line[7:]}


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A local port that accepts connections and never answers (a hung or firewalled host)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(16)
        yield sock.getsockname()[1]


def test_redis_that_never_answers_gives_up_in_bounded_time(spark, tmp_path, silent_port):
    """No endless retry: socket timeout 1 s, 3 retries, then exit 1 (in-process)."""
    result = run_in_process(spark, job_args(
        f"redis://127.0.0.1:{silent_port}/0", tmp_path, ["orders"],
        "redis.connect_timeout_s=1", "redis.socket_timeout_s=1"))
    assert result.code == 1
    assert result.seconds < 20, result.seconds
    (line,) = result.error_lines()
    assert f"cannot reach Redis at 127.0.0.1:{silent_port}" in line, line
    assert "Timeout" in line


# --- (c) two runs at once ---------------------------------------------------------------------

@pytest.mark.parametrize(("path", "redis_version_server", "schedule"),
                         [("materialised", "redis", ()), ("one-pass", "redis", ()),
                          ("journaled", "redis", ()), ("materialised", "redis62", ()),
                          ("journaled", "redis62", ()), ("journaled", "redis", BACKOFF),
                          ("one-pass", "redis62", BACKOFF), ("plan", "redis", ()),
                          ("plan", "valkey", ()), ("journaled-split", "redis", ())],
                         ids=["materialised-redis", "one-pass-redis", "journaled-redis",
                              "materialised-redis62", "journaled-redis62",
                              "journaled-redis-backoff", "one-pass-redis62-backoff",
                              "plan-redis", "plan-valkey", "journaled-split-redis"],
                         indirect=["redis_version_server"])
def test_two_runs_at_once_never_handle_or_dead_letter_an_entry_twice(
        spark, redis_version_server, tmp_path, small_batches, submit, caplog, path, schedule):
    """Run A (spark-submit) hands over slowly while run B (in-process) claims.

    materialised (local[2,2], no claim journal: A's tasks may be retried): A claims
    everything first; once its claims are older than min_idle_ms, B claims what A has not
    leased yet. Only the lease renewed before each handler call keeps A from handing those
    entries over as well. one-pass (local[2]) and journaled (local[2,2] with the journal):
    A claims 20 entries at a time and hands each step over at once; B claims what A has not
    reached, and A's later steps must leave B's entries alone. Under a backoff schedule
    (both runs), B's claims make its entries not due for A (delivered twice), and entries
    not due for either run stay with their owner. plan: as journaled, both runs applying
    the same dry run's plan (claims by ID, XCLAIM's min-idle guard). journaled-split: as
    journaled, run B splitting each stream over two parts (a shared cursor).
    """
    one_pass = path != "materialised"
    client = redis_version_server.client()
    streams = ["c-a", "c-b"]
    kinds = {"ok": (40, 1), "poison": (6, 9), "fail_at_limit": (4, 4),
             **(WAITING_KIND if schedule else {})}
    seeded = seed_kinds(client, streams, kinds)
    write_control(redis_version_server.url, delay_s=0.5)  # slow until B has claimed, then fast
    common = ["claim.min_idle_ms=1500", "handler.timeout_s=1", "handler.batch_size=2",
              *schedule]
    logs = tmp_path / "logs"
    # One partition: A hands over 2 entries per 0.5 s, it would need ~22 s for its backlog.
    a_only = ["claim.count=20"] if one_pass else ["claim.journal_prefix="]
    plan = planned(spark, redis_version_server.url, tmp_path, streams, *common) \
        if path == "plan" else []
    proc = submit([*job_args(redis_version_server.url, tmp_path, streams, *common, *a_only,
                             "spark.partitions=1", run_id="A"), *plan], logs, SMALL_BATCHES,
                  master="local[2]" if path == "one-pass" else "local[2,2]")
    claimed = ((lambda: job_owned(client, streams, "A") > 0) if one_pass
               else (lambda: owned_by(client, streams, DEAD) == 0))
    assert wait_until(claimed, proc, 180, "run A's claim"), "run A ended before its claim was seen"
    time.sleep(1.6)  # A's claims are now idle longer than min_idle_ms
    outcome: dict[str, Any] = {}
    split = SPLIT if path.endswith("-split") else ()
    args_b = [*job_args(redis_version_server.url, tmp_path, streams, *common, *split,
                        run_id="B"), *plan]
    run_b = threading.Thread(target=lambda: outcome.update(b=run_in_process(spark, args_b)))
    run_b.start()
    wait_until(lambda: job_owned(client, streams, "B") > 0 or not run_b.is_alive(), None, 120,
               "run B's claim")
    write_control(redis_version_server.url, delay_s=0)
    run_b.join(120)
    run_a = finished(proc, logs, timeout_s=180)
    assert (run_a.code, outcome["b"].code) == (0, 0), (run_a.stderr[-2000:], outcome["b"].stderr)
    assert ("in one pass" in run_a.stderr) is one_pass, "run A did not take the path asked for"
    assert ("journaled" in run_a.stderr) is (path in ("journaled", "plan", "journaled-split")), \
        "run A: not the path asked"

    handed = handed_over(client)
    assert handed and max(handed.values()) == 1, {k: n for k, n in handed.items() if n > 1}
    states = final_states(client, seeded)  # never dead-lettered twice
    fates = {"ok": "acked", "waiting": f"pending:{DEAD}"}
    expected = {k: fates.get(kind, "dead_lettered") for k, kind in seeded.items()}
    assert states == expected
    reports = {r: report_rows(spark, tmp_path, r) for r in ("A", "B")}
    final = {"reprocessed", "dead_lettered"}
    for key, kind in seeded.items():
        done = [r for r in ("A", "B") for row in rows_by_key(reports[r]).get(key, [])
                if row["action"] in final]
        assert len(done) == (0 if kind == "waiting" else 1), (key, done)
    b_final = [r for r in reports["B"] if r["action"] in final]
    assert b_final, "run B took over nothing: the race this test is about did not happen"
    if split:
        assert "2 streams split over several tasks" in caplog.text, "run B split nothing"
    if schedule:
        waiting = sum(1 for kind in seeded.values() if kind == "waiting")
        assert outcome["b"].summary["not_due"] >= waiting
        assert run_a.summary["not_due"] >= waiting


# --- (d) live consumers acking meanwhile ----------------------------------------------------

# Atomic: ack one random entry owned by a job consumer, but only while the job's claim is
# still running (the dead consumer still owns some of the stuck entries, and the claim takes
# them all before any hand-over), so the ack surely comes before the hand-over.
# KEYS: the streams, then LIVE_ACKED. ARGV: group, the dead consumer, a random number,
# '1' to ack ('0' only to ask whether the claim is done).
ACK_WHILE_CLAIMING = """
local n = #KEYS - 1
local group, dead, pick_at = ARGV[1], ARGV[2], tonumber(ARGV[3])
local unclaimed, owners = 0, {}
for i = 1, n do
  local summary = redis.call('XPENDING', KEYS[i], group)
  for _, c in ipairs(summary[4] or {}) do
    if c[1] == dead then unclaimed = unclaimed + tonumber(c[2]) end
    if string.sub(c[1], 1, 9) == 'recovery-' then owners[#owners + 1] = {KEYS[i], c[1]} end
  end
end
if unclaimed == 0 then return 'claim-done' end
if #owners == 0 or ARGV[4] == '0' then return 'not-yet' end
local pick = owners[(pick_at % #owners) + 1]
local rows = redis.call('XPENDING', pick[1], group, '-', '+', 100, pick[2])
local row = rows[(pick_at % #rows) + 1]
redis.call('XACK', pick[1], group, row[1])
local entry = pick[1] .. ' ' .. group .. ' ' .. row[1]
local now = redis.call('TIME')
redis.call('HSET', KEYS[n + 1], entry, now[1] * 1000 + math.floor(now[2] / 1000))
return entry
"""


# Atomic: once hand-overs have begun (so the job's PEL read is over and only the lease can
# notice), ack an entry owned by a job consumer that the handler has not had yet, far from
# the chunk being handed over right now: the last of a stream's unhandled entries while at
# least ARGV[2] more come before it (a unit is handed over in ID order, a chunk at a time).
# The job must find it gone at its lease and never hand it over.
# KEYS: the streams, then HANDLED, LIVE_ACKED. ARGV: group, entries ahead, a random number.
ACK_UNLEASED = """
local n = #KEYS - 2
local group, ahead, pick_at = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
if redis.call('HLEN', KEYS[n + 1]) == 0 then return 'none' end
local candidates = {}
for i = 1, n do
  local unhandled = {}
  for _, row in ipairs(redis.call('XPENDING', KEYS[i], group, '-', '+', 1000)) do
    local entry = KEYS[i] .. ' ' .. group .. ' ' .. row[1]
    if string.sub(row[2], 1, 9) == 'recovery-' and redis.call('HEXISTS', KEYS[n + 1], entry) == 0
    then
      unhandled[#unhandled + 1] = {KEYS[i], row[1], entry}
    end
  end
  if #unhandled > ahead then candidates[#candidates + 1] = unhandled[#unhandled] end
end
if #candidates == 0 then return 'none' end
local pick = candidates[(pick_at % #candidates) + 1]
redis.call('XACK', pick[1], group, pick[2])
local now = redis.call('TIME')
redis.call('HSET', KEYS[n + 2], pick[3], now[1] * 1000 + math.floor(now[2] / 1000))
return pick[3]
"""


class LiveConsumers:
    """A producer and a live consumer on the same streams, plus the slow original consumer
    that finally acks entries the job has claimed meanwhile."""

    def __init__(self, server: LocalServer, streams: list[str]) -> None:
        self.client = server.client()
        self.streams = streams
        self.ack_while_claiming = self.client.register_script(ACK_WHILE_CLAIMING)
        self.ack_unleased = self.client.register_script(ACK_UNLEASED)
        self.rng = random.Random(7)
        self.stop = threading.Event()
        self.fresh: list[tuple[str, str]] = []
        self.acked_in_claim: list[str] = []
        self.acked_later: list[str] = []
        self.thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        claiming = True
        while not self.stop.is_set():
            for stream in self.streams:
                self.fresh.append((stream, self.client.xadd(stream, {"kind": "live"}).decode()))
            for _stream, entries in self.client.xreadgroup(
                    GROUP, "worker-live", {s: ">" for s in self.streams}, count=10) or []:
                stream = _stream.decode()
                self.client.xack(stream, GROUP, *[e[0] for e in entries])
            if claiming:
                claiming = self._ack_one_while_claiming(len(self.acked_in_claim) < 12)
            elif len(self.acked_later) < 8:
                self._ack_one_not_yet_leased()
            time.sleep(0.05)

    def _ack_one_while_claiming(self, ack: bool) -> bool:
        """False once the job's claim is over."""
        reply = self.ack_while_claiming(keys=[*self.streams, LIVE_ACKED],
                                        args=[GROUP, DEAD, self.rng.randrange(10**6), int(ack)])
        if reply == b"claim-done":
            return False
        if reply != b"not-yet":
            self.acked_in_claim.append(reply.decode())
        return True

    def _ack_one_not_yet_leased(self) -> None:
        reply = self.ack_unleased(keys=[*self.streams, HANDLED, LIVE_ACKED],
                                  args=[GROUP, 12, self.rng.randrange(10**6)])
        if reply != b"none":
            self.acked_later.append(reply.decode())


@pytest.mark.parametrize(("journal", "schedule", "plan"),
                         [("", (), False), ("recovery:journal:", (), False),
                          ("recovery:journal:", BACKOFF, False), ("recovery:journal:", (), True),
                          ("recovery:journal:", SPLIT, False)],
                         ids=["materialised", "journaled", "journaled-backoff", "plan",
                              "journaled-split"])
def test_entries_acked_by_live_consumers_are_never_handed_over_or_dead_lettered(
        spark, redis_version_server, tmp_path, small_batches, caplog, journal, schedule, plan):
    """While the job runs, a live consumer keeps reading and acking new entries, and the
    original consumer acks entries the job has claimed: during the claim (the PEL read after
    the claim must drop them) and during the hand-overs (the lease must find them gone).
    Materialised (no claim journal), every claim comes before the first hand-over; journaled
    (one pass), each claim step is handed over at once, so the acks during the claim land
    between a step's claim and its hand-over, or on steps still to come, and the claim is
    over only when little is left to ack later. Under a backoff schedule (every entry
    due: the live consumer's script waits for the dead consumer to own none), the claim
    script's steps meet the acks. plan: as journaled, the run applying a dry run's plan
    made before the live consumers began (claims by ID). journaled-split: as journaled, each
    stream split over two parts (a shared cursor: the "schedule" settings carry it)."""
    client = redis_version_server.client()
    streams = ["l-a", "l-b"]
    kinds = {"poison": (10, 9), "ok": (40, 1)}  # entries for the handler come last
    seeded = seed_kinds(client, streams, kinds)
    write_control(redis_version_server.url, delay_s=0.15)
    settings = ["claim.min_idle_ms=60000", "claim.count=5", "claim.max_entries_per_s=30",
                "handler.batch_size=4", f"claim.journal_prefix={journal}", *schedule]
    url = redis_version_server.url
    plan_args = planned(spark, url, tmp_path, streams, *settings) if plan else []
    live = LiveConsumers(redis_version_server, streams)
    live.thread.start()
    result = run_in_process(spark, [*job_args(url, tmp_path, streams, *settings,
                                              run_id="live"), *plan_args])
    live.stop.set()
    live.thread.join(10)
    assert result.code == 0, result.stderr
    assert (schedule != SPLIT) or "2 streams split over several tasks" in caplog.text

    assert len(live.acked_in_claim) >= 3 and (journal or len(live.acked_later) >= 3), \
        (live.acked_in_claim, live.acked_later, "the live consumer acked too little to test")
    # The lease is read again before a call once its last reading is LEASE_FRESH_S old: an
    # ack younger than that may meet the call (one pass: the claim is the first reading).
    # A call is recorded moments after its lease check; 400 ms of slack for a loaded machine.
    late = {k: int(ms) for k, ms in client.hgetall(VIOLATIONS).items()}
    window_ms = LEASE_FRESH_S * 1000 + 400 if journal else -1
    assert all(ms <= window_ms for ms in late.values()), \
        ("handed over after a live consumer acked it", late)
    handed = handed_over(client)
    letters = dead_letter_index(client, streams)
    # One pass: an entry may be acked while the handler has it (not a violation: the
    # recording handler saw it still unacked); its row then says the job's ack came second.
    before_ack = {entry for entry in live.acked_in_claim if journal and handed[key_of(entry)]}
    for entry in live.acked_in_claim + live.acked_later:
        key = key_of(entry)
        assert handed[key] == 0 or entry in before_ack, f"{entry} handed over after its ack"
        assert key not in letters, f"{entry} dead-lettered after its ack"
    states = final_states(client, seeded)
    for key, kind in seeded.items():
        acked_live = entry_key(*key) in live.acked_in_claim + live.acked_later
        if kind == "ok" or acked_live:
            assert states[key] == "acked", (key, states[key])
        else:
            assert states[key] == "dead_lettered", (key, states[key])
    rows = rows_by_key(report_rows(spark, tmp_path, "live"))
    for entry in live.acked_in_claim + live.acked_later:
        (row,) = rows[key_of(entry)]
        if entry in before_ack:
            assert row["action"] == "reprocessed" and "acked by another consumer" in row["reason"]
        else:
            assert row["action"] == "skipped", row
    fresh = [(s, GROUP, i) for s, i in live.fresh]
    assert len(fresh) > 20
    assert not [k for k in fresh if handed[k] or k in letters or k in rows]


# --- (e) Spark task failures (local[2,3] retries) -------------------------------------------

@pytest.mark.parametrize("journal", ["recovery:journal:", ""], ids=["journaled", "materialised"])
@pytest.mark.parametrize(("faults_asked", "schedule", "plan", "split"), [
    (("claim 2 0",), (), False, ()),
    (("apply 1 0", "apply 2 1"), (), False, ()),
    (("claim 2 0", "apply 2 1"), BACKOFF, False, ()),
    (("claim 2 0",), (), True, ()),
    (("apply 1 0", "apply 2 1"), (), True, ()),
    (("claim 2 0", "apply 2 1"), (), False, SPLIT),
    (("claim 2 0", "apply 2 1"), BACKOFF, False, SPLIT),
], ids=["claim", "apply", "claim-apply-backoff", "claim-plan", "apply-plan",
        "claim-apply-split", "claim-apply-backoff-split"])
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


@pytest.mark.parametrize("fault", ["apply 2 0"])  # one pass: "claim 2 0" fires then too
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
