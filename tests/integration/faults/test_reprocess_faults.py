"""Faults while the job requeues or reassigns, checked in Redis afterwards: every entry ends
exactly once as requeued (one copy, the original acked), reassigned (pending on one live
consumer), dead-lettered or still pending; nothing a live consumer acked is moved.

- SIGKILL of a real spark-submit (local[2], one pass) at a random moment of its moves, then
  a run that finishes (the kill proven to land mid-move, or the test fails);
- two runs at once (spark-submit and in-process) over the same groups, while a live
  consumer acks entries of them.
"""

from __future__ import annotations

import random
import threading
import time
from contextlib import nullcontext
from pathlib import Path

import pytest
from redis import Redis

from recovery.testing.local_redis import LocalServer
from tests.support.fault_tools import (
    GROUP,
    finished,
    job_args,
    kill_landed,
    run_in_process,
    spark_submit,
    wait_until,
)
from tests.support.invariants import final_states, pel
from tests.support.reprocess_tools import LIVE, WINDOW_MS, copies, kept_alive, stuck

pytestmark = pytest.mark.slow  # kill trials and spark-submit runs

KINDS = {"ok": (40, 1), "poison": (6, 9)}
SLOW = ["claim.count=5", "claim.max_entries_per_s=60", "dead_letter.batch_size=3"]
SEED = 7
KILL_ATTEMPTS = 3  # a kill that misses its moment is tried again, earlier


def first_ids(client: Redis, streams: list[str]) -> dict[str, str]:
    """Each stream's last ID before the run: copies come after it."""
    return {s: client.xinfo_stream(s)["last-generated-id"].decode() for s in streams}


def moved(client: Redis, seeded: dict, streams: list[str], mode: str) -> int:
    """Seeded entries moved so far: copies appended (requeue: the streams grew by them) or
    pending on a live consumer (reassign)."""
    if mode == "requeue":
        return sum(client.xlen(s) for s in streams) - len(seeded)
    ids = {k[2] for k in seeded}
    return sum(1 for s in streams for i, p in pel(client, s, GROUP).items()
               if i in ids and p.consumer in LIVE)


def check_each_once(client: Redis, seeded: dict, streams: list[str], before: dict[str, str],
                    mode: str, acked_elsewhere: set | frozenset = frozenset()) -> None:
    """The invariant, in Redis: poison dead-lettered once; each ok entry requeued once (one
    copy, original acked) or reassigned (pending on a live consumer), unless a live consumer
    acked it first (then no copy and no owner)."""
    states = final_states(client, seeded)  # asserts: never two dead letters, never both
    for key, kind in seeded.items():
        if kind == "poison":
            assert states[key] == "dead_lettered", (key, states[key])
        elif key[2] in acked_elsewhere or mode == "requeue":
            assert states[key] == "acked", (key, states[key])
        else:
            assert states[key] in {f"pending:{c}" for c in LIVE}, (key, states[key])
    if mode == "requeue":
        for stream in streams:
            made = copies(client, stream, before[stream])  # asserts: no entry copied twice
            originals = {k[2] for k, v in seeded.items() if k[0] == stream and v == "ok"}
            assert len(made) == len(originals - set(acked_elsewhere)), stream


# Each fault test costs a spark-submit per case. Requeue once per fault, on Redis 7.0 for
# one and 6.2 for the other; reassign on 7.0 (its reply shapes are the claim's: the
# per-server tests of tests/integration/test_requeue.py and test_reassign.py cover them).
KILL_CASES = pytest.mark.parametrize(
    ("redis_version_server", "mode"), [("redis", "requeue"), ("redis", "reassign")],
    indirect=["redis_version_server"])
RACE_CASES = pytest.mark.parametrize(
    ("redis_version_server", "mode"), [("redis62", "requeue"), ("redis", "reassign")],
    indirect=["redis_version_server"])


def _kill_mid_move(server: LocalServer, tmp_path: Path, streams: list[str], seeded: dict,
                   mode: str, n: int, run_id: str) -> tuple[bool, str]:
    """Start a real spark-submit (local[2], one pass) moving `streams` slowly, SIGKILL it once
    `n` entries are moved. Returns whether the kill landed (the moment seen in Redis, the
    job still running and ended by this SIGKILL, exit -9, with moves left to do) and how far
    the moves were at the kill."""
    client = server.client()
    total = sum(1 for kind in seeded.values() if kind == "ok")
    proc = spark_submit(job_args(server.url, tmp_path, streams, "claim.min_idle_ms=1000",
                                 *SLOW, *_mode_args(mode), run_id=run_id),
                        tmp_path / f"logs-{run_id}")
    reached = wait_until(lambda: moved(client, seeded, streams, mode) >= n, proc, 180,
                         f"{n} entries moved")
    by_this_kill = kill_landed(proc)
    at_kill = moved(client, seeded, streams, mode)
    client.close()
    return reached and by_this_kill and at_kill < total, f"{at_kill}/{total} moved"


def _mode_args(mode: str) -> list[str]:
    return [f"reprocess.mode={mode}", f"reprocess.live_within_ms={WINDOW_MS}"]


@pytest.mark.timeout(480)
@KILL_CASES
def test_sigkill_mid_move_then_rerun_moves_each_entry_once(spark, redis_version_server,
                                                          tmp_path, mode):
    """The kill must land mid-move (see _kill_mid_move); one that misses is tried again, on
    fresh streams, after half as many moves, up to KILL_ATTEMPTS times, else the test
    fails."""
    server: LocalServer = redis_version_server
    client = server.client()
    rng = random.Random(f"{SEED}-{mode}")
    first = rng.randint(1, 79)
    missed = []
    for attempt in range(KILL_ATTEMPTS):
        n = max(1, first >> attempt)
        streams = [f"kq{attempt}-a", f"kq{attempt}-b{{t}}"]
        seeded = {}
        for stream in streams:
            seeded.update(stuck(client, stream, KINDS))
        before = first_ids(client, streams)
        time.sleep(WINDOW_MS / 1000 + 0.5)  # seeding touched the dead consumer: let it go stale
        alive = kept_alive(server.client(), streams, LIVE) if mode == "reassign" \
            else nullcontext()
        with alive:
            landed, at_kill = _kill_mid_move(server, tmp_path, streams, seeded, mode, n,
                                             f"killed{attempt}")
            if landed:
                time.sleep(1.1)  # what the killed run claimed becomes idle enough to claim again
                rerun = run_in_process(spark, job_args(server.url, tmp_path, streams,
                                                       "claim.min_idle_ms=1000",
                                                       *_mode_args(mode), run_id="rerun"))
        if landed:
            break
        missed.append(f"aimed at {n} moves, missed ({at_kill} at the kill)")
    assert landed, f"no kill landed mid-move in {KILL_ATTEMPTS} attempts: {missed}"
    assert rerun.code == 0, rerun.stderr
    print(f"{mode}: killed after {n} moves ({at_kill} at the kill; {len(missed)} missed "
          f"attempt(s) before)", flush=True)
    check_each_once(client, seeded, streams, before, mode)


@pytest.mark.timeout(240)
@RACE_CASES
def test_two_runs_at_once_and_a_live_consumer_acking_move_each_entry_once(
        spark, redis_version_server, tmp_path, mode):
    """Run A (spark-submit) moves slowly; run B (in-process) claims what A claimed once it
    is idle enough (min_idle 1 s); meanwhile a live consumer acks some original entries.
    Only the scripts' pending and ownership checks decide: no entry is copied twice or
    moved by both, none a live consumer acked is moved at all."""
    server: LocalServer = redis_version_server
    client = server.client()
    streams = ["tq-a"]
    seeded = stuck(client, "tq-a", KINDS)
    before = first_ids(client, streams)
    ok_ids = [k[2] for k, v in seeded.items() if v == "ok"]
    acked: set[str] = set()
    stop = threading.Event()

    def live_acker() -> None:  # acks every 4th ok entry, from the back
        ack_client = server.client()
        for entry_id in reversed(ok_ids[::4]):
            if stop.wait(0.05):
                return
            if ack_client.xack("tq-a", GROUP, entry_id):
                acked.add(entry_id)

    slow = ["claim.min_idle_ms=1000", "claim.count=5", "dead_letter.batch_size=2",
            f"reprocess.mode={mode}", f"reprocess.live_within_ms={WINDOW_MS}"]
    time.sleep(WINDOW_MS / 1000 + 0.5)  # seeding touched the dead consumer: let it go stale
    alive = kept_alive(server.client(), streams, LIVE) if mode == "reassign" else nullcontext()
    alive.__enter__()
    # A claims at a quarter of B's pace (39 entries: about 8 s), so B's single pass over the
    # PEL overtakes A's claim loop whatever the machine's speed: B takes what A claimed over
    # a second ago and what lies ahead of A; A keeps what it claimed in its last second.
    a_pace, b_pace = [*slow, "claim.max_entries_per_s=5"], [*slow, "claim.max_entries_per_s=20"]
    proc = spark_submit(job_args(server.url, tmp_path, streams, *a_pace, run_id="A"),
                        tmp_path / "logs", master="local[2,2]")
    acker = threading.Thread(target=live_acker, daemon=True)
    wait_until(lambda: len(pel(client, "tq-a", GROUP)) < 46 or
               any(p.consumer.startswith("recovery-A") for p in
                   pel(client, "tq-a", GROUP).values()), proc, 120, "run A's first claim")
    acker.start()
    time.sleep(1.2)
    run_b = run_in_process(spark, job_args(server.url, tmp_path, streams, *b_pace, run_id="B"))
    run_a = finished(proc, Path(tmp_path / "logs"), timeout_s=180)
    alive.__exit__(None, None, None)
    stop.set()
    acker.join(10)
    assert (run_a.code, run_b.code) == (0, 0), (run_a.stderr[-2000:], run_b.stderr)
    assert acked, "the live consumer acked nothing: the fault this test is about did not happen"
    check_each_once(client, seeded, streams, before, mode, acked)
    action = "requeued" if mode == "requeue" else "reassigned"
    moved_by = {r: run.summary["totals"][action] for r, run in (("A", run_a), ("B", run_b))}
    # (a reassigned entry the live consumer acked afterwards counts as moved and as acked)
    assert sum(moved_by.values()) >= 40 - len(acked) and min(moved_by.values()) > 0, \
        (moved_by, "both runs must have moved some, or the race was not tested")
