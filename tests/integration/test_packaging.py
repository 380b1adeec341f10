"""The package reaches executors as a built wheel, from a directory without the source tree.

Builds the wheel (``pip wheel . --no-deps``), ships it with ``spark-submit --py-files`` under
a ``.zip`` name (PySpark puts only .zip/.egg/.jar py-files on the executors' path), and runs
both jobs from a clean directory with a Python that has the dependencies but not the package,
so every ``import recovery`` on the driver and the executors (and the Lua scripts, read with
importlib.resources) comes from the wheel. Then the wheel pip-installed into a fresh venv
(conftest's ``wheel_python``, made once per run): its ``redis-stream-recovery-job`` runs the
job in its own process from an empty directory. That venv's ``redis-stream-recovery`` command
(recovery.cli.main) submitting the job files the package carries is
tests/integration/test_first_hour.py's.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from recovery.testing.backlog import (
    add_entries,
    create_group,
    deliver,
    make_stuck,
    seed_demo_backlog,
)
from tests.support.wheels import deps_only_python

pytestmark = pytest.mark.slow  # builds the wheel, then spark-submit runs

ROOT = Path(__file__).resolve().parents[2]
SPARK_SUBMIT = Path(sys.executable).parent / "spark-submit"


def clean_env(python: str) -> dict[str, str]:
    """No PYTHONPATH (conftest puts the source tree there for the other tests)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "RECOVERY_FAULT_FILE")}
    return {**env, "PYSPARK_PYTHON": python}


def submit(cwd: Path, python: str, zip_path: Path, *args: str) -> tuple[int, dict, str]:
    env = clean_env(python)
    done = subprocess.run([str(SPARK_SUBMIT), "--master", "local[2]", "--py-files",
                           str(zip_path), *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=600)
    return done.returncode, json.loads(done.stdout.strip().splitlines()[-1]), done.stderr


def test_jobs_run_from_the_wheel_in_a_clean_directory(wheel_zip, redis_server, tmp_path):
    python = deps_only_python(tmp_path / "venv")
    probe = subprocess.run([python, "-c", "import recovery"], cwd=tmp_path,
                           env=clean_env(python), capture_output=True)
    assert probe.returncode != 0, "recovery must not be importable without the wheel"
    shutil.copytree(ROOT / "jobs", tmp_path / "app" / "jobs")
    client = redis_server.client()
    seed_demo_backlog(client, per_stream=200)
    base = ["--set", f"redis.url={redis_server.url}", "--set", "streams.match=*"]

    code, summary, err = submit(tmp_path / "app", python, wheel_zip, "jobs/recover.py", *base,
                                "--set", f"report.path={tmp_path / 'reports'}",
                                "--set", "handler.path=recovery.handlers:example_handler")
    assert code == 0, err[-3000:]
    assert summary["totals"]["dead_lettered"] == 24  # 4 poison entries x 3 streams x 2 groups
    assert client.xlen("{orders}:dlq") == 8

    code, summary, err = submit(tmp_path / "app", python, wheel_zip, "jobs/redrive.py", *base,
                                "--set", "redrive.limit=5")
    assert code == 0, err[-3000:]
    assert summary["totals"]["redriven"] == 5
    assert client.xlen("{orders}:dlq") == 3


def test_the_wheel_carries_the_jobs_and_the_command_not_the_test_tooling(wheel_zip):
    names = zipfile.ZipFile(wheel_zip).namelist()
    assert {"recovery/jobs/recover.py", "recovery/jobs/redrive.py",
            "recovery/jobs/dead_letters.py", "recovery/__main__.py",
            "recovery/redis_io/lua/claim_due.lua",
            # the console's every asset (no CDN, no build step)
            "recovery/console/templates/base.html", "recovery/console/templates/browse.html",
            "recovery/console/static/console.css"} <= set(names)
    assert [n for n in names if n.startswith("recovery/testing")] == []
    [entry_points] = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
    text = zipfile.ZipFile(wheel_zip).read(entry_points).decode()
    assert "redis-stream-recovery = recovery.cli.main:main" in text
    for job in ("recover", "redrive", "dead_letters"):  # the job classes' modules' main
        assert f"= recovery.jobs.{job}:main" in text


def test_the_installed_job_command_runs_the_job_in_its_own_process(wheel_python, redis_server,
                                                                    tmp_path):
    """The wheel pip-installed into a fresh venv (its dependencies seen through a .pth), run
    from an empty directory: its ``redis-stream-recovery-job`` runs the job in the command's
    own process, as a platform's wheel task runs it (PySpark starts its own local Spark, no
    spark-submit of the tool's); Redis shows the work done. The same wheel's
    ``redis-stream-recovery`` submitting the job file the package carries through
    spark-submit (``dry-run``, then ``run``, from a folder without the checkout) is
    tests/integration/test_first_hour.py's, on this same installed venv; ``apply PLAN``
    through that command is tests/integration/test_readme_commands.py::test_installed_apply
    (the same recovery.cli.main, the same recovery.jobs.recover)."""
    python = wheel_python
    client = redis_server.client()
    create_group(client, "orders", "billing")
    ids = add_entries(client, "orders", 7, lambda i: {"n": str(i)})
    deliver(client, "orders", "billing", "crashed", 7)
    make_stuck(client, "orders", "billing", "crashed", ids, idle_ms=3_600_000)
    env = {**clean_env(python), "PATH": f"{SPARK_SUBMIT.parent}:{os.environ['PATH']}",
           "PYSPARK_SUBMIT_ARGS": "--master local[2] --conf spark.ui.enabled=false "
                                  "pyspark-shell"}
    env.pop("PYSPARK_PYTHON")  # the command's own Python by default
    base = ["--set", f"redis.url={redis_server.url}", "--set", "streams.keys=orders",
            "--set", f"report.path={tmp_path / 'reports'}",
            "--set", "handler.path=recovery.handlers:example_handler"]
    (tmp_path / "empty").mkdir()
    command = str(Path(python).parent / "redis-stream-recovery-job")

    done = subprocess.run([command, *base], cwd=tmp_path / "empty", env=env,
                          capture_output=True, text=True, timeout=600)

    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    in_process = json.loads(done.stdout.strip().splitlines()[-1])
    assert in_process["totals"]["reprocessed"] == 7
    assert client.xpending("orders", "billing")["pending"] == 0
