"""Whole runs against a Redis behind a proxy that answers one byte at a time
(tests/support/redis_drip.py), each reply now bounded whole (recovery.redis_io.deadline):
the driver (recovery.jobs.recover) before Spark, the executors' claim in a Spark run, and the
redrive command (recovery.redrive.run) whose move script's reply drips. Each shows the drip
happened and was cut by the client, the one-line error and the JSON summary, and what Redis
holds afterwards: nothing acked, moved twice or lost."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
import redis

from recovery.redis_io.scripts import load_scripts
from recovery.testing.backlog import create_group
from tests.support.backlogs import DEAD
from tests.support.fault_tools import (
    dead_letter_total,
    handed_over,
    job_args,
    pending_per_consumer,
    run_in_process,
    seed_kinds,
    write_control,
)
from tests.support.redis_drip import DrippingRedis, cut_seen
from tests.support.redrive_tools import dead_letter

ROOT = Path(__file__).resolve().parents[3]
GIVE_UP = "the reply was not done within"
# The job's client: 3 retries after the first attempt, backoff 0.1, 0.2, 0.4 s (redis_conn).
ATTEMPTS, BACKOFF_S = 4, 0.7


@pytest.mark.slow
def test_the_driver_gives_up_on_a_dripping_redis_in_one_line_and_touches_nothing(
        redis_server, tmp_path):
    """The run's first calls (the driver's, before Spark) through the drip: exit 1 with one
    line within the client's 4 attempts, each ended by its bound; the backlog as it was."""
    client = redis_server.client()
    seeded = seed_kinds(client, ["drip-d"], {"ok": (5, 1)})
    with DrippingRedis(redis_server.port, interval_s=0.05) as drip:
        port = drip.port
        result = run_in_process(None, job_args(
            drip.url, tmp_path, ["drip-d"], "redis.socket_timeout_s=1",
            "redis.connect_timeout_s=1"))
        cut = cut_seen(drip, ATTEMPTS)
    assert result.code == 1, result.stderr
    (line,) = result.error_lines()
    assert f"cannot reach Redis at 127.0.0.1:{port}" in line and GIVE_UP in line, line
    assert result.summary["exit_code"] == 1 and result.summary["status"] == "error"
    assert result.seconds < ATTEMPTS * 1.5 + BACKOFF_S + 2, result.seconds
    assert cut == ATTEMPTS
    assert pending_per_consumer(client, ["drip-d"]) == Counter({DEAD: len(seeded)})


@pytest.mark.slow
def test_an_executor_claim_whose_reply_drips_fails_the_run_and_loses_nothing(
        spark, redis_server, tmp_path):
    """The driver's calls pass at once; a connection's replies drip once it sent an
    XAUTOCLAIM (the executors' claim, in a Spark task). The task gives up after its 4
    attempts, the run exits 1 in one line; nothing was handed over, acked or dead-lettered,
    every entry is still pending in the group. The next run, straight to Redis, finishes
    each entry once."""
    client = redis_server.client()
    seeded = seed_kinds(client, ["drip-e"], {"ok": (20, 1)})
    write_control(redis_server.url)
    with DrippingRedis(redis_server.port, interval_s=0.05, after=b"XAUTOCLAIM") as drip:
        result = run_in_process(spark, job_args(
            drip.url, tmp_path, ["drip-e"], "redis.socket_timeout_s=1",
            "redis.connect_timeout_s=1", "claim.min_idle_ms=60000", run_id="dripped"))
        cut = cut_seen(drip, ATTEMPTS)
    assert result.code == 1, result.stderr
    (line,) = result.error_lines()
    print(f"claims dripped: exit {result.code} in {result.seconds:.1f} s, {cut} replies cut, "
          f"{drip.dripped} bytes dripped: {line}", flush=True)
    assert GIVE_UP in line, line
    assert result.summary["exit_code"] == 1 and result.summary["status"] == "error"
    assert cut >= ATTEMPTS and drip.dripped > 0
    assert handed_over(client) == Counter()
    assert sum(pending_per_consumer(client, ["drip-e"]).values()) == len(seeded)
    assert client.xlen("drip-e") == len(seeded) and dead_letter_total(client, ["drip-e"]) == 0
    time.sleep(1.1)  # what the cut claims took is idle past the next run's min_idle_ms
    rerun = run_in_process(spark, job_args(redis_server.url, tmp_path, ["drip-e"],
                                           "claim.min_idle_ms=1000", run_id="after-drip"))
    assert rerun.code == 0, rerun.stderr
    assert handed_over(client) == Counter(dict.fromkeys(seeded, 1))
    assert sum(pending_per_consumer(client, ["drip-e"]).values()) == 0


def letters(client: redis.Redis, n: int) -> None:
    create_group(client, "orders", "billing")
    dead_letter(client, "orders", "billing", [{b"n": str(i).encode()} for i in range(n)],
                ["max-deliveries-exceeded"] * n)


def redrive_command(url: str, conf_dir: Path, *sets: str) -> subprocess.CompletedProcess[str]:
    """``python -m recovery redrive`` on its in-process path (no master, no driver Python
    elsewhere, an empty Spark conf directory), 60 s at most."""
    args = [a for s in (f"redis.url={url}", "streams.keys=orders", "redis.socket_timeout_s=1",
                        "redis.connect_timeout_s=1", *sets) for a in ("--set", s)]
    dropped = ("MASTER", "RECOVERY_SPARK_SUBMIT", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON",
               "SPARK_ENV_LOADED", "SPARK_HOME")
    env = {k: v for k, v in os.environ.items() if k not in dropped}
    return subprocess.run([sys.executable, "-m", "recovery", "redrive", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=60,
                          env={**env, "SPARK_CONF_DIR": str(conf_dir)})


@pytest.mark.slow
def test_a_redrive_whose_moves_reply_drips_moves_each_letter_at_most_once(
        redis_server, tmp_path):
    """The redrive's move script runs on the server while its reply drips (the scripts
    loaded ahead, so the first EVALSHA moves): each attempt ends by its bound, the command
    exits 1 with its JSON last; every letter is once in the source or once in the
    dead-letter stream, never twice, never gone."""
    client = redis_server.client()
    letters(client, 40)
    load_scripts(client)
    with DrippingRedis(redis_server.port, interval_s=0.05, after=b"EVALSHA") as drip:
        done = redrive_command(drip.url, tmp_path, "redrive.batch_size=10")
        cut = cut_seen(drip, 1)
    assert done.returncode == 1, done.stdout + done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1])["status"] == "failed"
    assert GIVE_UP in done.stderr, done.stderr[-2000:]
    assert cut >= 1
    back = [f[b"n"] for _, f in client.xrange("orders") if b"x-redrive-count" in f]
    left = [f[b"n"] for _, f in client.xrange("{orders}:dlq")]
    assert back, "the script moved letters while its reply dripped"
    assert sorted(back + left) == sorted(str(i).encode() for i in range(40))




@pytest.mark.slow
def test_a_redrive_whose_cut_move_was_retried_says_its_count_may_be_short(
        redis_server, tmp_path):
    """The first move script's reply drips and is cut by its bound after the script moved
    its batch; the retry, on a new connection, is served at once and the redrive finishes
    (exit 0). Every letter is back in the source once, and the JSON summary does not pass
    off a short `redriven` as exact: it says in `warnings` that a call's moves went
    uncounted, or counts them."""
    client = redis_server.client()
    letters(client, 40)
    load_scripts(client)
    with DrippingRedis(redis_server.port, interval_s=0.05, after=b"EVALSHA",
                       drip_connections=1) as drip:
        done = redrive_command(drip.url, tmp_path, "redrive.batch_size=10")
        cut = cut_seen(drip, 1)
    assert done.returncode == 0, done.stdout + done.stderr
    assert cut >= 1
    back = [f[b"n"] for _, f in client.xrange("orders") if b"x-redrive-count" in f]
    assert sorted(back) == sorted(str(i).encode() for i in range(40))
    assert client.xlen("{orders}:dlq") == 0
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    print(f"redriven {summary['totals']['redriven']} of {len(back)} moved; "
          f"warnings {summary['warnings']}", flush=True)
    assert summary["totals"]["redriven"] == len(back) or any(
        "redriven" in w and "retried" in w for w in summary["warnings"]), summary
