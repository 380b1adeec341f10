"""The operator commands without a cluster master run in the command's own Python
(recovery.cli.in_process): which commands and Spark options stay in, which go to
spark-submit, and that what runs here does the job's work with its output and exit codes.

The command is ``python -m recovery`` (``redis-stream-recovery``) with ``SPARK_HOME`` naming
a stub spark-submit that only says it was started: whether the job went to spark-submit is
then in its output."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from recovery.cli.in_process import is_local, runs_here
from recovery.cli.routes import ROUTES
from recovery.jobs.job_command import JobCommand
from recovery.testing.backlog import create_group
from recovery.testing.local_redis import LocalServer
from tests.support.redrive_tools import dead_letter
from tests.support.stub_spark import STARTED, stub_spark_home

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def stub_spark(tmp_path: Path) -> dict[str, str]:
    """The environment of a command whose spark-submit only prints STARTED, exit 0, and
    whose Spark conf directory is empty (no spark-defaults.conf naming a master)."""
    home = stub_spark_home(tmp_path)
    return {"SPARK_HOME": str(home), "SPARK_CONF_DIR": str(home / "conf")}


def command(*args: str, env: dict[str, str], timeout_s: float = 300
            ) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if k not in ("MASTER", "RECOVERY_SPARK_SUBMIT")}
    return subprocess.run([sys.executable, "-m", "recovery", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout_s,
                          env={**environ, **env})


@pytest.mark.parametrize(("command_name", "spark_args", "environ", "here"), [
    ("redrive", [], {}, True),
    ("dry-run", ["--master", "local[2]"], {}, True),
    ("apply", ["--master=local"], {}, True),
    ("dead-letters", [], {"MASTER": "local[*]"}, True),
    ("run", [], {}, False),  # the scheduled job: spark-submit
    ("dry-run", ["--master", "yarn"], {}, False),
    ("dry-run", ["--master", "local-cluster[2,1,1024]"], {}, False),
    ("redrive", [], {"MASTER": "spark://h:7077"}, False),
    ("dry-run", ["--master", "local[2]", "--conf", "spark.ui.enabled=false"], {}, False),
    ("dead-letters", ["--py-files", "h.zip"], {}, False),
    ("redrive", [], {"RECOVERY_SPARK_SUBMIT": "1"}, False),
])
def test_which_commands_run_here(command_name, spark_args, environ, here, tmp_path,
                                 monkeypatch):
    monkeypatch.setenv("SPARK_CONF_DIR", str(tmp_path))  # no spark-defaults.conf
    assert runs_here(command_name, spark_args, environ) is here


def test_a_driver_python_of_another_environment_sends_the_job_to_spark_submit(
        tmp_path, monkeypatch):
    """The driver would import the handler in that Python, not in this one."""
    monkeypatch.setenv("SPARK_CONF_DIR", str(tmp_path))
    monkeypatch.delenv("PYSPARK_DRIVER_PYTHON", raising=False)
    monkeypatch.setenv("PYSPARK_PYTHON", str(tmp_path / "other-venv" / "bin" / "python"))
    assert not runs_here("dry-run", [], {})
    monkeypatch.setenv("PYSPARK_PYTHON", sys.executable)
    assert runs_here("dry-run", [], {})


def test_a_master_in_spark_defaults_sends_the_job_to_spark_submit(tmp_path, monkeypatch):
    (tmp_path / "spark-defaults.conf").write_text("spark.master  yarn\n")
    monkeypatch.setenv("SPARK_CONF_DIR", str(tmp_path))
    assert not runs_here("redrive", [], {})
    (tmp_path / "spark-defaults.conf").write_text("spark.master=local[4]\n")
    assert runs_here("redrive", [], {})


def test_each_command_runs_its_job_class_from_the_file_spark_submit_runs():
    """recovery.cli.routes: a command's job class (run here, and checked before
    spark-submit) lives in the very file spark-submit is given; only the redrive runs no
    Spark of its own."""
    for name, route in ROUTES.items():
        job = route.job()
        assert issubclass(job, JobCommand), name
        assert Path(sys.modules[job.__module__].__file__ or "").resolve() == route.file, name
    assert [name for name, route in ROUTES.items() if not route.runs_spark] == ["redrive"]


def test_local_masters():
    assert all(map(is_local, ["local", "local[2]", "local[*]", "local[2,3]"]))
    assert not any(map(is_local, ["yarn", "local-cluster[2,1,1024]", "k8s://h", "localhost"]))


def redrive_args(server: LocalServer) -> list[str]:
    return ["redrive", "--set", f"redis.url={server.url}", "--set", "streams.keys=orders"]


@pytest.mark.slow
def test_a_redrive_runs_here_and_moves_the_letters(redis_server, stub_spark):
    """No spark-submit, no JVM: the letters are back in their stream (Redis shows it), the
    JSON line last on stdout, exit 0; the same command with a cluster master goes to
    spark-submit."""
    client = redis_server.client()
    create_group(client, "orders", "billing")
    dead_letter(client, "orders", "billing", [{b"n": b"1"}, {b"n": b"2"}],
                ["max-deliveries-exceeded"] * 2)
    before = client.xlen("orders")

    done = command(*redrive_args(redis_server), env=stub_spark)

    assert done.returncode == 0, done.stdout + done.stderr
    assert STARTED not in done.stdout
    assert "log4j" not in done.stdout + done.stderr, "a JVM started"
    last = json.loads(done.stdout.strip().splitlines()[-1])
    assert (last["status"], last["totals"]["redriven"]) == ("ok", 2)
    assert client.xlen("{orders}:dlq") == 0 and client.xlen("orders") == before + 2
    sent = command(*redrive_args(redis_server), "--", "--master", "yarn", env=stub_spark)
    assert STARTED in sent.stdout, sent.stdout + sent.stderr


@pytest.mark.slow
def test_a_redrive_that_cannot_reach_redis_exits_1_with_the_json_error_line(stub_spark):
    """The job's exit code and lines, here as under spark-submit: exit 1, one ``error:``
    line (on stderr: spark-submit would merge it into stdout), the JSON line last."""
    done = command("redrive", "--set", "redis.url=redis://127.0.0.1:1/0",
                   "--set", "streams.keys=orders", env=stub_spark)
    assert done.returncode == 1, done.stdout + done.stderr
    assert STARTED not in done.stdout
    assert [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    last = json.loads(done.stdout.strip().splitlines()[-1])
    assert (last["status"], last["exit_code"]) == ("failed", 1)


@pytest.mark.slow
@pytest.mark.timeout(700)  # a JVM start: minutes on a loaded 2-core machine
def test_a_dry_run_runs_here_on_a_local_session(redis_server, tmp_path):
    """A dry run with a local master: this process starts the local Spark (PySpark launches
    the JVM through the real spark-submit, so no stub here: the job's log lines stay on
    stderr, where under spark-submit's PythonRunner they would be merged into stdout),
    prints the job's tables and JSON line, exit 0; Redis is unchanged."""
    client = redis_server.client()
    create_group(client, "orders", "billing")
    ids = [client.xadd("orders", {"n": str(i)}).decode() for i in range(6)]
    client.xreadgroup("billing", "crashed", {"orders": ">"})
    client.xclaim("orders", "billing", "crashed", 0, ids, idle=3_600_000, justid=True)
    done = command("dry-run", "--set", f"redis.url={redis_server.url}",
                   "--set", "streams.keys=orders", "--set", f"report.path={tmp_path / 'r'}",
                   "--", "--master", "local[1]", env={}, timeout_s=600)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    assert "TOTAL" not in done.stdout, "stderr merged into stdout: spark-submit ran the job"
    last = json.loads(done.stdout.strip().splitlines()[-1])
    assert (last["dry_run"], last["totals"]["would_reprocess"]) == (True, 6)
    assert "TOTAL" in done.stderr  # the summary table, logged as under spark-submit
    assert client.xpending("orders", "billing")["pending"] == 6
    assert {c["name"] for c in client.xinfo_consumers("orders", "billing")} == {b"crashed"}
