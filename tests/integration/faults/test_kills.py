"""SIGKILL of spark-submit at seeded random moments (claim, dead-letter, report, handler), then
reruns: nothing is lost, nothing handled or dead-lettered twice.

``RECOVERY_KILL_TRIALS`` (default 2) sets the number of kill trials per case, ``RECOVERY_KILL_SEED``
their random seed; each trial whose kill landed prints one line (``pytest -s`` shows them).
Every fault here is proven to have happened, or the test fails; after each, Redis itself is
checked: every seeded entry is exactly one of acked, in its dead-letter stream exactly once,
still pending, or deleted upstream; and the reports account for what happened (the kill landed
mid-work: exit -9, its moment seen in Redis, work left).
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession
from redis import Redis

from recovery.testing.local_redis import LocalServer
from tests.support.backlogs import DEAD, HOUR_MS, age_pending
from tests.support.fault_checks import (
    PER_STREAM,
    SMALL_BATCHES,
    TRIAL_KINDS,
    check_accounting,
    check_states,
    side_effect_totals,
)
from tests.support.fault_tools import (
    BACKOFF,
    GROUP,
    SPLIT,
    WAITING_KIND,
    Key,
    dead_letter_total,
    job_args,
    job_consumers,
    job_owned,
    kill_landed,
    owned_by,
    planned,
    report_rows,
    run_in_process,
    seed_kinds,
    wait_until,
    write_control,
)
from tests.support.handlers import HANDLED
from tests.support.invariants import final_states, pel
from tests.support.servers import FLAVORS, start_server

pytestmark = pytest.mark.slow  # kills, restarts and spark-submit runs

KILL_TRIALS = int(os.environ.get("RECOVERY_KILL_TRIALS", "2"))
KILL_SEED = int(os.environ.get("RECOVERY_KILL_SEED", "4"))
KILL_ATTEMPTS = 3  # per trial: a kill that misses its moment is tried again, earlier
STAGES = ("claim", "dead_letter", "report", "handler")
# One pass without task retries, then the journaled one pass (tasks may be retried), in turn.
KILL_MASTERS = ("local[2]", "local[2,2]")



def _kill_moment(stage: str, streams: list[str], rng: random.Random) -> int:
    """Where a trial's first attempt kills: after that many of its stage's side effects
    (claims, dead letters, hand-overs), or (stage ``report``) that many ms after the last."""
    claimable, handed, letters = side_effect_totals(streams)
    if stage == "report":
        return int(rng.uniform(0, 2000))
    return rng.randint(1, {"claim": claimable, "dead_letter": letters, "handler": handed}[stage]
                       - 1)


def _kill_condition(stage: str, client: Redis, streams: list[str], run_id: str, n: int,
                    plan: bool = False) -> tuple[Callable[[], bool], str]:
    """When to kill (read in Redis) and what that moment is, for `n` of _kill_moment."""
    claimable, handed, letters = side_effect_totals(streams)
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
    _, handed, letters = side_effect_totals(streams)
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
@pytest.mark.parametrize(("schedule", "plan", "first"),
                         [((), False, 0), (BACKOFF, False, 1), ((), True, 2)],
                         ids=["xautoclaim", "backoff", "plan"])
def test_sigkill_at_random_moments_then_rerun_loses_nothing(spark, tmp_path, submit, schedule,
                                                           plan, first):
    """Trials are numbered from `first`, which sets each trial's stage (STAGES in turn),
    server (Redis 7.0, Valkey 8.1, Redis 6.2 in turn, each a fresh one), master and whether
    the streams are split: with the default two trials per case, the three cases kill at
    all four stages, on each server twice and on each master three times.
    Under a backoff schedule (killed run and re-runs alike), entries not due stay with
    their owner throughout, and what the killed run claimed waits as delivered once more.
    `plan`: the killed run and its re-runs apply a dry run's plan (claims by ID).
    Only trials whose kill landed count (see _kill_trial); one whose every attempt missed
    fails the test."""
    rng = random.Random(KILL_SEED)
    landed, missed = [], []
    for trial in range(first, first + KILL_TRIALS):
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
