"""Redis restarted mid-run (SIGKILL, the same AOF, back after a pause), unreachable at start, or
never answering: a rerun loses nothing; a run that cannot reach Redis fails in bounded time with
one line.

Every fault here is proven to have happened, or the test fails; after each, Redis itself is
checked: every seeded entry is exactly one of acked, in its dead-letter stream exactly once,
still pending, or deleted upstream; and the reports account for what happened (Redis went down
while the run was in flight).
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from recovery.testing.local_redis import LocalServer, free_port
from tests.support.fault_checks import (
    rerun_and_account,
    side_effect_totals,
)
from tests.support.fault_tools import (
    finished,
    job_args,
    run_in_process,
    seed_kinds,
    wait_until,
    write_control,
)
from tests.support.handlers import HANDLED
from tests.support.servers import start_server

pytestmark = pytest.mark.slow  # kills, restarts and spark-submit runs


@pytest.fixture
def aof_server(request: pytest.FixtureRequest) -> Iterator[LocalServer]:
    srv = start_server(request.param, "--appendonly", "yes", "--appendfsync", "always")
    yield srv
    srv.stop()


@pytest.mark.parametrize(("aof_server", "down_s"),
                         [("redis", 1.5), ("redis62", 1.5), ("redis", None)],
                         indirect=["aof_server"])
def test_redis_restart_mid_run_then_rerun_loses_nothing(spark, aof_server, tmp_path,
                                                        small_batches, down_s):
    """Redis is SIGKILLed mid-run and started again on the same AOF after `down_s`: 1.5 s
    may be bridged by the client's retries and Spark's task retries; None keeps it down
    until the run has ended, which must then fail in one line (exit 1). How long a run
    bridges depends on the load (a retried task may start seconds later), so the case
    that must fail keeps Redis down for the whole run rather than for a fixed time; it runs
    on 7.0 only."""
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
    if down_s is None:
        job.join(180)  # down for the rest of the run
    else:
        time.sleep(down_s)
    aof_server.start()
    job.join(120)
    assert not job.is_alive()
    _, handed_total, _ = side_effect_totals(streams)
    assert in_flight and handed_at_kill < handed_total, \
        ("Redis restarted after the run, not during it", in_flight, handed_at_kill)
    first = outcome["r"]
    print(f"run during the restart (killed at {handed_at_kill}/{handed_total} hand-overs): "
          f"exit {first.code} {first.error_lines()}", flush=True)
    assert first.code in ((0, 1) if down_s is not None else (1,))
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
