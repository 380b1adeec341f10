"""Attacks on the re-processing modes' own settings (recovery/settings/reprocess.py) and the
options they send to the executors (``JobParams.mode_options``), through the command a user
runs (``python -m recovery``) against a real server, Redis checked afterwards."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import redis

from recovery.testing.backlog import create_group
from recovery.testing.local_redis import LocalServer

ROOT = Path(__file__).resolve().parents[3]


def command(*args: str, env: dict[str, str] | None = None
            ) -> subprocess.CompletedProcess[str]:
    """``python -m recovery ARGS`` in the checkout, its spark-submit the real one."""
    environ = {k: v for k, v in os.environ.items()
               if k not in ("MASTER", "RECOVERY_SPARK_SUBMIT", "SPARK_HOME")}
    return subprocess.run([sys.executable, "-m", "recovery", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=300,
                          env={**environ, **(env or {})})


def stuck(client: redis.Redis, stream: str, group: str, n: int) -> None:
    """`n` entries of `stream` delivered to one consumer of `group` and never acked."""
    create_group(client, stream, group)
    for i in range(n):
        client.xadd(stream, {"n": str(i)})
    client.xreadgroup(group, "c1", {stream: ">"})


def test_a_requeue_template_without_a_suffix_is_refused(redis_server: LocalServer,
                                                        tmp_path: Path) -> None:
    """Found: ``reprocess.requeue_stream = "{stream}"`` passed the template check (a suffix
    "that may hold {group}", here empty); for a stream without a hash tag (``orders``) it
    names ``{orders}``, another key, which no consumer group reads: the run acked the three
    entries of ``orders`` / ``billing`` and appended their copies to ``{orders}``, exit 0,
    status ok (XPENDING 0, XLEN {orders} 3, no group on it). Now: refused as a config error
    (exit 2) before anything is touched; the entries stay pending, no ``{orders}`` key."""
    client = redis_server.client()
    stuck(client, "orders", "billing", 3)

    done = command("run", "--set", f"redis.url={redis_server.url}", "--set",
                   "streams.keys=orders", "--set", "reprocess.mode=requeue", "--set",
                   "reprocess.requeue_stream={stream}", "--set", "claim.min_idle_ms=1",
                   "--set", f"report.path={tmp_path / 'reports'}")

    assert done.returncode == 2, done.stdout + done.stderr
    assert "reprocess.requeue_stream" in done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1])["exit_code"] == 2
    assert client.xpending("orders", "billing")["pending"] == 3
    assert client.exists("{orders}") == 0


@pytest.mark.slow
def test_a_requeue_target_read_by_several_groups_is_refused(redis_server: LocalServer,
                                                            tmp_path: Path) -> None:
    """Found: the several-groups rule looked at the source only. ``{orders}:r`` is an
    application stream read by the groups ``shipping`` and ``audit``;
    ``reprocess.requeue_stream = "{stream}:r"`` for ``orders`` / ``billing`` (one group)
    named it: the run acked billing's three entries and appended their copies there, exit 0,
    status ok, and both of its groups would read them (XLEN {orders}:r 1 -> 4). Now: refused
    as a config error (exit 2) before anything is claimed; the entries stay pending and the
    target keeps its length."""
    client = redis_server.client()
    stuck(client, "orders", "billing", 3)
    for group in ("shipping", "audit"):
        create_group(client, "{orders}:r", group)
    client.xadd("{orders}:r", {"app": "own"})

    done = command("run", "--set", f"redis.url={redis_server.url}", "--set",
                   "streams.keys=orders", "--set", "reprocess.mode=requeue", "--set",
                   "reprocess.requeue_stream={stream}:r", "--set", "claim.min_idle_ms=1",
                   "--set", f"report.path={tmp_path / 'reports'}")

    assert done.returncode == 2, done.stdout + done.stderr
    told = done.stdout + done.stderr  # spark-submit merges the job's stderr into stdout
    assert "{orders}:r" in told and "shipping" in told
    assert json.loads(done.stdout.strip().splitlines()[-1])["exit_code"] == 2
    assert client.xpending("orders", "billing")["pending"] == 3
    assert client.xlen("{orders}:r") == 1
