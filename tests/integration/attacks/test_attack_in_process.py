"""Attacks on the installed command's in-process path (recovery.cli.in_process): settings
spark-submit honours that the in-process choice must not ignore, and environment values
read defensively. Through the command a user runs (``python -m recovery``), against a real
server, Redis checked afterwards.

``SPARK_HOME`` names a stub spark-submit that only says it was started, so whether the job
went to spark-submit is in its output, and what it did in Redis is what the in-process run
did."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import redis

from recovery.cli.in_process import runs_here
from recovery.testing.backlog import create_group
from recovery.testing.local_redis import LocalServer
from tests.support.redis_drip import DrippingRedis
from tests.support.redrive_tools import dead_letter
from tests.support.servers import ON_ONE_SERVER
from tests.support.stub_spark import STARTED, stub_spark_home

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def stub_home(tmp_path: Path) -> Path:
    """A SPARK_HOME whose spark-submit prints STARTED and a JSON line, exit 0; its conf
    directory empty."""
    return stub_spark_home(tmp_path)


def command(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    dropped = ("MASTER", "RECOVERY_SPARK_SUBMIT", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON",
               "SPARK_ENV_LOADED")
    environ = {k: v for k, v in os.environ.items() if k not in dropped}
    return subprocess.run([sys.executable, "-m", "recovery", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=120,
                          env={**environ, **env})


def letters(server: LocalServer, n: int) -> int:
    """`n` dead letters of ``orders``; the source's length after them."""
    client = server.client()
    create_group(client, "orders", "billing")
    dead_letter(client, "orders", "billing", [{b"n": str(i).encode()} for i in range(n)],
                ["max-deliveries-exceeded"] * n)
    assert client.xlen("{orders}:dlq") == n
    return int(client.xlen("orders"))


def redrive(server: LocalServer, home: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return command("redrive", "--set", f"redis.url={server.url}", "--set",
                   "streams.keys=orders",
                   env={"SPARK_HOME": str(home), "SPARK_CONF_DIR": str(home / "conf"), **env})


def stopped_redrive(server: LocalServer, home: Path, n: int,
                    stop: Callable[[subprocess.Popen[str]], None]
                    ) -> tuple[subprocess.Popen[str], str, str]:
    """A redrive of ``orders``' `n` letters run here (rate-capped at 4000 letters/s, its
    spark-submit `home`'s), stopped by `stop` once at least 1000 letters moved (or after
    60 s): the process, once ended, and its stdout and stderr."""
    client = server.client()
    environ = {k: v for k, v in os.environ.items()
               if k not in ("MASTER", "RECOVERY_SPARK_SUBMIT", "PYSPARK_PYTHON")}
    environ.update(SPARK_HOME=str(home), SPARK_CONF_DIR=str(home / "conf"))
    job = subprocess.Popen([sys.executable, "-m", "recovery", "redrive", "--set",
                            f"redis.url={server.url}", "--set", "streams.keys=orders",
                            "--set", "redrive.max_entries_per_s=4000"],
                           cwd=ROOT, env=environ, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while client.xlen("{orders}:dlq") > n - 1000 and time.monotonic() < deadline:
        time.sleep(0.05)
    stop(job)
    out, err = job.communicate(timeout=60)
    return job, out, err


@pytest.mark.parametrize("line", [
    "export MASTER=yarn",
    "MASTER=spark://spark-master:7077",
    "export PYSPARK_PYTHON=/opt/jobs-venv/bin/python",
    "  export PYSPARK_DRIVER_PYTHON=/opt/jobs-venv/bin/python  # the jobs' environment",
])
def test_a_master_or_python_in_spark_env_sh_sends_the_job_to_spark_submit(
        line, redis_server, stub_home):
    """spark-submit sources ``$SPARK_CONF_DIR/spark-env.sh`` (load-spark-env.sh): a master
    (``MASTER``) or a driver Python set there is one the job would run with. Found: the
    redrive ran here, on this machine and this Python, and moved the letters; the cluster
    master in spark-env.sh was silently ignored."""
    length = letters(redis_server, 3)
    (stub_home / "conf" / "spark-env.sh").write_text(f"#!/usr/bin/env bash\n{line}\n")

    done = redrive(redis_server, stub_home)

    assert STARTED in done.stdout, done.stdout + done.stderr
    client = redis_server.client()
    assert (client.xlen("{orders}:dlq"), client.xlen("orders")) == (3, length)


def test_spark_env_sh_without_a_master_or_python_keeps_the_job_here(
        redis_server, stub_home, monkeypatch):
    """What spark-env.sh sets besides those (and comments naming them) keeps the fast path:
    the redrive runs here and the letters are back in their stream."""
    length = letters(redis_server, 2)
    (stub_home / "conf" / "spark-env.sh").write_text(
        "# MASTER=yarn would send the job to the cluster\nexport SPARK_MASTER_HOST=h\n"
        "SPARK_LOCAL_IP=127.0.0.1\n")
    monkeypatch.setenv("SPARK_CONF_DIR", str(stub_home / "conf"))
    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    monkeypatch.delenv("PYSPARK_DRIVER_PYTHON", raising=False)
    assert runs_here("redrive", [], {})

    done = redrive(redis_server, stub_home)

    assert done.returncode == 0 and STARTED not in done.stdout, done.stdout + done.stderr
    client = redis_server.client()
    assert (client.xlen("{orders}:dlq"), client.xlen("orders")) == (0, length + 2)


@pytest.mark.parametrize("value", ["true", "yes", "on", "2", " 1"])
def test_a_recovery_spark_submit_value_other_than_0_or_1_is_refused(
        value, redis_server, stub_home):
    """Found: ``RECOVERY_SPARK_SUBMIT=true`` (or ``yes``) was silently read as "not 1": the
    command ran here, moving the letters, where the user asked for spark-submit. Now: exit 2,
    one error line naming the variable and the values it takes, the JSON error line last,
    nothing moved."""
    length = letters(redis_server, 2)

    done = redrive(redis_server, stub_home, RECOVERY_SPARK_SUBMIT=value)

    assert done.returncode == 2, done.stdout + done.stderr
    assert STARTED not in done.stdout
    errors = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "RECOVERY_SPARK_SUBMIT" in errors[0], done.stderr
    last = json.loads(done.stdout.strip().splitlines()[-1])
    assert (last["status"], last["exit_code"]) == ("error", 2)
    client = redis_server.client()
    assert (client.xlen("{orders}:dlq"), client.xlen("orders")) == (2, length)


@pytest.mark.parametrize(("value", "started"), [("1", True), ("0", False), ("", False)])
def test_recovery_spark_submit_1_0_and_empty(value, started, redis_server, stub_home):
    """The documented value 1 sends the redrive to spark-submit (nothing moved here); 0 and
    empty keep it here (the letters moved)."""
    letters(redis_server, 2)
    done = redrive(redis_server, stub_home, RECOVERY_SPARK_SUBMIT=value)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (STARTED in done.stdout) is started
    assert redis_server.client().xlen("{orders}:dlq") == (2 if started else 0)


@pytest.mark.slow
def test_an_interrupted_redrive_reports_the_letters_it_moved(redis_server, stub_home):
    """Ctrl-C (SIGINT) in the middle of a rate-capped redrive run here: exit 1, the JSON line
    last with status ``failed`` and, found, ``totals.redriven`` 0 and no unit while Redis
    shows thousands moved (the stream's unit was added to the summary only when it ended).
    Now the JSON counts what was moved, short by at most the one batch whose reply the
    interrupt cut off; nothing lost or doubled (dead-letter stream + source hold every
    letter once), and a rerun moves the rest."""
    n = 20_000
    length = letters(redis_server, n)
    client = redis_server.client()
    job, out, err = stopped_redrive(redis_server, stub_home, n,
                                    lambda job: job.send_signal(signal.SIGINT))

    moved = n - client.xlen("{orders}:dlq")
    assert 1000 <= moved < n, "the interrupt came mid-redrive"
    assert job.returncode == 1, out + err
    last = json.loads(out.strip().splitlines()[-1])
    assert last["status"] == "failed" and "interrupted" in last["error"]
    assert 0 <= moved - last["totals"]["redriven"] <= 100, (moved, last["totals"])
    assert [u["redriven"] for u in last["units"]] == [last["totals"]["redriven"]]
    assert client.xlen("orders") == length + moved

    rerun = redrive(redis_server, stub_home)
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    assert json.loads(rerun.stdout.strip().splitlines()[-1])["totals"]["redriven"] == n - moved
    assert (client.xlen("{orders}:dlq"), client.xlen("orders")) == (0, length + n)
    redriven = [f[b"n"] for _, f in client.xrange("orders")][length:]
    assert sorted(redriven) == sorted(str(i).encode() for i in range(n))


@pytest.mark.slow
def test_a_terminated_redrive_says_so_in_its_json_line(redis_server, stub_home):
    """SIGTERM (a scheduler's timeout, ``kill``) in the middle of a redrive run here. Found:
    the process died at once (exit -15/143): no ``error:`` line, no JSON line, no metrics
    push, against the README's "the last line of stdout is always a JSON summary" (under
    spark-submit the same signal left the Python driver running on, orphaned). Now it ends
    as Ctrl-C does: exit 1, the JSON line last counting what moved; nothing lost or
    doubled."""
    n = 20_000
    length = letters(redis_server, n)
    client = redis_server.client()
    job, out, err = stopped_redrive(redis_server, stub_home, n, lambda job: job.terminate())

    moved = n - client.xlen("{orders}:dlq")
    assert 1000 <= moved < n, "the signal came mid-redrive"
    assert job.returncode == 1, (job.returncode, out, err)
    assert [line for line in err.splitlines() if line.startswith("error: ")]
    last = json.loads(out.strip().splitlines()[-1])
    assert (last["status"], last["exit_code"]) == ("failed", 1)
    assert 0 <= moved - last["totals"]["redriven"] <= 100, (moved, last["totals"])
    assert client.xlen("orders") == length + moved


@pytest.mark.slow
@pytest.mark.timeout(700)  # a JVM start: minutes on a loaded 2-core machine
@ON_ONE_SERVER  # refused before any claim; the public run on every server: test_end_to_end
def test_the_public_run_still_makes_the_checks_the_command_line_makes_once(
        spark, client, make_settings, tmp_path):
    """The command line checks once (``preflight``) and passes ``checked=True``; the public
    ``recovery.run`` does not, so it must refuse by itself: a handler that does not import
    and a report path that is a file are refused (exit 2 at the command line) before
    anything is claimed. Redis shows nothing claimed, delivered or moved."""
    import recovery
    from recovery.errors import EXIT_BAD_INPUT, RecoveryError

    create_group(client, "orders", "billing")
    ids = [client.xadd("orders", {"n": str(i)}).decode() for i in range(3)]
    client.xreadgroup("billing", "crashed", {"orders": ">"})
    client.xclaim("orders", "billing", "crashed", 0, ids, idle=3_600_000, justid=True)
    before = pending_of(client)
    report_file = tmp_path / "a-file"
    report_file.write_text("")

    for bad in ("handler.path=no_such_module_here:handle", f"report.path={report_file}"):
        with pytest.raises(RecoveryError) as refused:
            recovery.run(spark, make_settings("streams.keys=orders", bad))
        assert refused.value.exit_code == EXIT_BAD_INPUT, refused.value
    assert pending_of(client) == before
    assert client.xlen("{orders}:dlq") == 0


def pending_of(client: redis.Redis) -> list[tuple[bytes, bytes, int]]:
    """(ID, consumer, deliveries) of each pending entry of ``orders``/``billing``."""
    return [(p["message_id"], p["consumer"], p["times_delivered"])
            for p in client.xpending_range("orders", "billing", "-", "+", 10)]


@pytest.mark.slow
def test_a_redis_answering_one_byte_at_a_time_does_not_hold_the_command(
        redis_server, stub_home):
    """A redrive run here against Redis behind a proxy dripping one byte per 0.2 s, with
    ``redis.socket_timeout_s=2``: it must end, exit 1 with the JSON line last, within 30 s.
    Found: still running at 30 s (and at 90 s by hand), the drip going on: the socket timeout
    bounded each read only. Now each reply is bounded whole (recovery.redis_io.deadline):
    the client gives up halfway through a reply (the proxy saw it), and Redis holds what it
    held."""
    length = letters(redis_server, 2)
    with DrippingRedis(redis_server.port, interval_s=0.2) as drip:
        try:
            done = subprocess.run(
                [sys.executable, "-m", "recovery", "redrive", "--set", f"redis.url={drip.url}",
                 "--set", "streams.keys=orders", "--set", "redis.socket_timeout_s=2",
                 "--set", "redis.connect_timeout_s=2"],
                cwd=ROOT, capture_output=True, text=True, timeout=30,
                env={**os.environ, "SPARK_HOME": str(stub_home),
                     "SPARK_CONF_DIR": str(stub_home / "conf")})
        except subprocess.TimeoutExpired:
            pytest.fail(f"still running after 30 s; {drip.dripped} bytes dripped")
        deadline = time.monotonic() + 1
        while drip.cut == 0 and time.monotonic() < deadline:
            time.sleep(0.05)  # the proxy sees the closed client at its next byte
    assert drip.dripped > 0, "the drip happened"
    assert drip.cut > 0, "the client gave up halfway through a reply"
    assert done.returncode == 1, done.stdout + done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1])["status"] == "failed"
    assert "the reply was not done within" in done.stderr, done.stderr[-2000:]
    client = redis_server.client()
    assert client.xlen("{orders}:dlq") == 2 and client.xlen("orders") == length


@pytest.mark.parametrize("defaults", [
    "spark.submit.deployMode  cluster\n",
    "spark.submit.deployMode=cluster\nspark.master local[2]\n",
])
def test_cluster_deploy_mode_in_spark_defaults_sends_the_job_to_spark_submit(
        defaults, redis_server, stub_home):
    """``spark.submit.deployMode cluster`` in spark-defaults.conf: the driver is not this
    process (spark-submit runs it on the cluster, or refuses it with a local master). Found:
    with no master (or a local one) beside it, the redrive ran here anyway and moved the
    letters, the deploy mode silently ignored."""
    length = letters(redis_server, 2)
    (stub_home / "conf" / "spark-defaults.conf").write_text(defaults)

    done = redrive(redis_server, stub_home)

    assert STARTED in done.stdout, done.stdout + done.stderr
    client = redis_server.client()
    assert (client.xlen("{orders}:dlq"), client.xlen("orders")) == (2, length)


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_a_terminated_spark_submit_redrive_stops_moving_letters(redis_server):
    """The same SIGTERM as test_a_terminated_redrive_says_so_in_its_json_line, through
    spark-submit (``RECOVERY_SPARK_SUBMIT=1``, the real one): within seconds of the command's
    exit the driver is gone too, having moved at most one poll interval's letters more.
    Found: 10,000 letters moved in the 5 s after the command
    exited 143 (Spark's PythonRunner left the driver running, its parent gone); now the
    driver sees its parent gone and stops (recovery/jobs/redrive.py stop_with_parent)."""
    n = 40_000
    letters(redis_server, n)
    client = redis_server.client()
    environ = {k: v for k, v in os.environ.items() if k not in ("MASTER", "PYSPARK_PYTHON")}
    job = subprocess.Popen([sys.executable, "-m", "recovery", "redrive", "--set",
                            f"redis.url={redis_server.url}", "--set", "streams.keys=orders",
                            "--set", "redrive.max_entries_per_s=2000"],
                           cwd=ROOT, env={**environ, "RECOVERY_SPARK_SUBMIT": "1"},
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 300
    while client.xlen("{orders}:dlq") > n - 1000 and time.monotonic() < deadline:
        time.sleep(0.1)
    try:
        job.terminate()
        job.wait(timeout=60)
        at_exit = client.xlen("{orders}:dlq")
        time.sleep(5)
        assert at_exit < n, "the signal came mid-redrive"
        assert not orphans(redis_server.url), "the driver outlived the command"
        # what the driver moves before it looks again (0.5 s at 2,000/s) and one batch
        assert at_exit - client.xlen("{orders}:dlq") <= 1_100, "letters moved on"
    finally:  # the orphan, found by its command line's unique server URL
        for pid in orphans(redis_server.url):
            os.kill(pid, signal.SIGKILL)


def orphans(url: str) -> list[int]:
    """PIDs of processes whose command line names `url` (this test's server alone)."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and url.encode() in (proc / "cmdline").read_bytes():
                found.append(int(proc.name))
        except OSError:
            continue
    return found


def closed_port() -> int:
    """A local TCP port nothing listens on (bound, then released)."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_an_inherited_pyspark_gateway_port_does_not_stop_the_in_process_redrive(
        redis_server, stub_home):
    """The installed command started by a PySpark driver (a task that shells out to
    ``redis-stream-recovery redrive``) inherits that driver's ``PYSPARK_GATEWAY_PORT`` and
    ``PYSPARK_GATEWAY_SECRET``. Found: the in-process redrive took them for its own
    spark-submit's (``register_with_cluster``), connected to a gateway that is not its own
    (here: gone), and failed, exit 1, nothing redriven. Now: the in-process route runs no
    spark-submit, so an inherited gateway is not its: exit 0, the letters back in their
    stream, the DLQ empty."""
    length = letters(redis_server, 3)

    done = redrive(redis_server, stub_home, PYSPARK_GATEWAY_PORT=str(closed_port()),
                   PYSPARK_GATEWAY_SECRET="not-ours")

    assert done.returncode == 0 and STARTED not in done.stdout, done.stdout + done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1])["status"] == "ok"
    client = redis_server.client()
    assert (client.xlen("{orders}:dlq"), client.xlen("orders")) == (0, length + 3)
