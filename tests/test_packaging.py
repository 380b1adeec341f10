"""The package reaches executors as a built wheel, from a directory without the source tree.

Builds the wheel (``pip wheel . --no-deps``), ships it with ``spark-submit --py-files`` under
a ``.zip`` name (PySpark puts only .zip/.egg/.jar py-files on the executors' path), and runs
both jobs from a clean directory with a Python that has the dependencies but not the package,
so every ``import recovery`` on the driver and the executors (and the Lua scripts, read with
importlib.resources) comes from the wheel.
"""

from __future__ import annotations

import json
import os
import shutil
import site
import subprocess
import sys
from pathlib import Path

import pytest

from recovery.testing.backlog import seed_demo_backlog

pytestmark = pytest.mark.slow  # builds the wheel, then spark-submit runs

ROOT = Path(__file__).resolve().parent.parent
SPARK_SUBMIT = Path(sys.executable).parent / "spark-submit"


@pytest.fixture(scope="module")
def wheel_zip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheelhouse")
    subprocess.run([sys.executable, "-m", "pip", "wheel", str(ROOT), "--no-deps", "-q",
                    "-w", str(out)], check=True, capture_output=True, timeout=300)
    [wheel] = out.glob("redis_stream_recovery-*.whl")
    return Path(shutil.copy(wheel, out / "redis_stream_recovery.zip"))


def deps_only_python(where: Path) -> str:
    """A venv that sees this venv's site-packages through a .pth line, so its dependencies
    import, but not the editable install of `recovery` (a .pth inside a .pth'd directory is
    not processed)."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where)], check=True)
    python = str(where / "bin" / "python")
    code = "import sysconfig; print(sysconfig.get_path('purelib'))"
    purelib = subprocess.run([python, "-c", code], check=True, capture_output=True,
                             text=True).stdout.strip()
    Path(purelib, "project-deps.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    return python


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
