"""A new user's first hour, from the wheel: a fresh venv (its dependencies seen through a
.pth, tests/support/wheels.py) and an empty folder; ``redis-stream-recovery init``; only the
Redis URL and the streams edited in the config it wrote; a handler module written in that
folder; then ``dry-run`` and ``run`` against a real server, checked in Redis. The handler
module of the working directory reaches the driver and the executors by itself
(recovery.cli.local_modules); a handler package cannot, is refused before Spark with the
ways to ship it, and runs once zipped and given to ``--py-files`` on a ``local-cluster``
master, whose executors are processes of their own."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from redis import Redis

from recovery.redis_io.dlq_names import dead_letter_key
from recovery.starter import STARTER_FILES
from recovery.testing.backlog import add_entries, create_group, deliver, make_stuck
from tests.support.stub_spark import STARTED, stub_spark_home

pytestmark = [pytest.mark.slow,  # spark-submit runs (and the run's wheel, if first)
              pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parents[2]
SPARK = ["--", "--conf", "spark.ui.enabled=false"]
HANDLER = """
from pathlib import Path
from recovery import Result

def handle(messages):
    with Path({log!r}).open("a") as log:
        for message in messages:
            log.write(message.stream + " " + message.id + "\\n")
    return [Result.success() for _ in messages]
"""


@pytest.fixture(scope="module")
def command(wheel_zip: Path, wheel_python: str) -> str:
    """The installed ``redis-stream-recovery`` of the venv with the wheel (conftest's session
    fixtures: built and installed once per run, shared with the packaging, notebook and README
    tests; this module only runs it)."""
    for file in STARTER_FILES:  # the wheel's copies are the checkout's files
        shipped = zipfile.ZipFile(wheel_zip).read(f"recovery/starter/{file.resource}")
        assert shipped == (ROOT / file.path).read_bytes(), file.path
    return str(Path(wheel_python).parent / "redis-stream-recovery")


def user_env(command: str) -> dict[str, str]:
    """A user's environment: spark-submit on PATH, no PYTHONPATH (conftest's checkout)."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYSPARK_PYTHON", "RECOVERY_FAULT_FILE")}
    return {**env, "PATH": f"{Path(sys.executable).parent}:{Path(command).parent}:"
                           f"{os.environ['PATH']}"}


def tool(command: str, folder: Path, *args: str, env: dict[str, str] | None = None
         ) -> tuple[int, dict, str]:
    """Run the installed command in `folder` (`env` over the user's): exit code, JSON line,
    stdout and stderr."""
    done = subprocess.run([command, *args], cwd=folder, env={**user_env(command), **(env or {})},
                          capture_output=True, text=True, timeout=600)
    output = done.stdout + done.stderr
    return done.returncode, json.loads(done.stdout.strip().splitlines()[-1]), output


def stuck_backlog(client: Redis, stream: str, count: int, poison: int) -> list[str]:
    """`count` entries of `stream` pending in ``billing`` for a crashed consumer for an hour,
    the first `poison` delivered 9 times (over the config's max_deliveries, 5)."""
    create_group(client, stream, "billing")
    ids = add_entries(client, stream, count, lambda i: {"n": str(i)})
    deliver(client, stream, "billing", "crashed", count)
    make_stuck(client, stream, "billing", "crashed", ids, idle_ms=3_600_000)
    if poison:
        make_stuck(client, stream, "billing", "crashed", ids[:poison], 3_600_000,
                   delivery_count=9)
    return ids


def edit_config(folder: Path, url: str, streams: list[str]) -> None:
    """The user's two edits of the config `init` wrote: the Redis URL and the streams."""
    config = folder / "conf" / "recovery.toml"
    before = config.read_text().splitlines()
    text = re.sub(r'(?m)^url = "[^"]*"', f'url = "{url}"', config.read_text(), count=1)
    text = re.sub(r'(?m)^keys = \[[^]]*\]', f"keys = {json.dumps(streams)}", text, count=1)
    config.write_text(text)
    changed = [b for a, b in zip(before, text.splitlines(), strict=True) if a != b]
    assert changed and all(line.startswith(("url = ", "keys = ")) for line in changed), changed


def test_init_then_dry_run_and_run_with_a_handler_of_the_folder(command, redis_server,
                                                                tmp_path):
    client = redis_server.client()
    streams = ["orders", "payments"]
    ids = {s: stuck_backlog(client, s, 12, poison=2) for s in streams}
    folder = tmp_path / "first-hour"
    folder.mkdir()

    code, written, _ = tool(command, folder, "init")
    assert (code, written["written"]) == (0, ["conf/recovery.toml"])
    edit_config(folder, redis_server.url, streams)
    handled = tmp_path / "handled.txt"
    (folder / "myhandlers.py").write_text(HANDLER.format(log=str(handled)))
    job = ["--config", "conf/recovery.toml", "--set", "handler.path=myhandlers:handle"]

    code, dry, output = tool(command, folder, "dry-run", *job, *SPARK, "--master", "local[2]")
    assert code == 0, output[-3000:]
    assert (dry["totals"]["would_reprocess"], dry["totals"]["would_dead_letter"]) == (20, 4)
    assert [client.xpending(s, "billing")["pending"] for s in streams] == [12, 12]
    assert not handled.exists()  # a dry run hands nothing over

    code, summary, output = tool(command, folder, "run", *job, *SPARK, "--master", "local[2]")
    assert code == 0, output[-3000:]
    assert f"shipping {folder / 'myhandlers.py'}" in output
    assert (summary["totals"]["reprocessed"], summary["totals"]["dead_lettered"]) == (20, 4)
    assert [client.xpending(s, "billing")["pending"] for s in streams] == [0, 0]
    assert sorted(handled.read_text().splitlines()) == sorted(
        f"{s} {i}" for s in streams for i in ids[s][2:])
    for s in streams:
        dead = client.xrange(dead_letter_key(s, ":dlq"))
        assert sorted(f[b"x-original-id"].decode() for _, f in dead) == sorted(ids[s][:2])
    assert Path(folder / summary["report_path"]).is_dir()  # report.path "reports": the folder


def test_a_handler_package_is_refused_with_the_ways_then_runs_from_a_zip_on_local_cluster(
        command, redis_server, tmp_path):
    client = redis_server.client()
    ids = stuck_backlog(client, "orders", 10, poison=0)
    folder = tmp_path / "app"
    folder.mkdir()
    assert tool(command, folder, "init")[0] == 0
    edit_config(folder, redis_server.url, ["orders"])
    handled = tmp_path / "handled.txt"
    (folder / "teamhandlers").mkdir()
    (folder / "teamhandlers" / "__init__.py").write_text("")
    (folder / "teamhandlers" / "orders.py").write_text(HANDLER.format(log=str(handled)))
    job = ["--config", "conf/recovery.toml", "--set", "handler.path=teamhandlers.orders:handle"]

    # Refused by the command itself: a spark-submit that only says it started (no JVM)
    # stands in for Spark's, so a refusal left to the job would exit 0 here.
    stub = {"SPARK_HOME": str(stub_spark_home(tmp_path))}
    code, refused, output = tool(command, folder, "run", *job, *SPARK, env=stub)
    assert (code, refused["exit_code"]) == (2, 2)
    assert STARTED not in output
    assert "module 'teamhandlers.orders' does not import" in refused["error"]
    assert "--py-files" in refused["error"] and ".zip of its package" in refused["error"]
    assert client.xpending("orders", "billing")["pending"] == 10  # refused before Redis

    archive = shutil.make_archive(str(tmp_path / "teamhandlers"), "zip", folder,
                                  "teamhandlers")
    # One worker: its executor is a process of its own (the subject); a second adds a JVM.
    code, summary, output = tool(command, folder, "run", *job, *SPARK, "--master",
                                 "local-cluster[1,1,1024]", "--py-files", archive)
    assert code == 0, output[-3000:]
    assert "shipping" not in output  # a package is never shipped by the command itself
    assert summary["totals"]["reprocessed"] == 10
    assert client.xpending("orders", "billing")["pending"] == 0
    assert sorted(handled.read_text().splitlines()) == sorted(f"orders {i}" for i in ids)
