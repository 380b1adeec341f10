"""Every ``redis-stream-recovery ...`` and ``spark-submit ...`` command README.md shows runs
here as README writes it (tests.support.readme_commands reads them from README itself, its
placeholders filled), against one real Redis holding a stuck backlog per command; each test
checks the exit code, the JSON last line and Redis itself.

A command README shows that no test here runs fails
``test_every_readme_command_runs_in_a_test``, as does a test whose command README no longer
shows. Where one run covers two commands, COVERED_BY says which and why. The commands behind
``redis-stream-recovery`` are recovery.cli.main's (the installed entry point, from the
project's venv); the spark-submit is the venv's, with its Python."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from redis import Redis

from recovery.testing.backlog import add_entries, create_group, deliver, make_stuck
from recovery.testing.local_redis import LocalServer
from tests.support.readme_commands import commands, invocation
from tests.support.redrive_tools import dead_letter
from tests.support.servers import start_server
from tests.support.stub_spark import STARTED, stub_spark_home

ROOT = Path(__file__).resolve().parents[2]
VENV_BIN = ROOT / ".venv" / "bin"
README_COMMANDS = commands((ROOT / "README.md").read_text(encoding="utf-8"))
HANDLER = "recovery.handlers:example_handler"
SPARK_OPTIONS = ["--", "--master", "local[2]", "--conf", "spark.ui.enabled=false"]
HOUR_MS = 3_600_000
GROUP = "g"

SUBMIT = ("spark-submit jobs/recover.py --config conf/recovery.toml "
          "[--set claim.min_idle_ms=600000]")
VENV_SUBMIT = "PYSPARK_PYTHON=.venv/bin/python .venv/bin/spark-submit jobs/recover.py"
INSTALLED = "redis-stream-recovery {} [options] [-- spark-submit options]"
CONFIG = "redis-stream-recovery config [--config FILE] [--set section.field=value]"
# README command -> the command whose run covers it, and why one run is enough.
COVERED_BY = {VENV_SUBMIT: (SUBMIT, "the same job file under the same launcher: SUBMIT runs "
                                    "with this PYSPARK_PYTHON and this venv's spark-submit")}
RUN_BY: dict[str, str] = {}  # README command -> the test that runs it


def runs(command: str) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """Mark a test as the one that runs README's `command`."""
    def mark(test: Callable[..., None]) -> Callable[..., None]:
        RUN_BY[command] = test.__name__
        return test
    return mark


def spark_run(test: Callable[..., None]) -> Callable[..., None]:
    """A test that starts Spark: slow, 15-30 s on a quiet 2-core machine, minutes on a busy
    one."""
    return pytest.mark.slow(pytest.mark.timeout(900)(test))


@dataclass
class Ran:
    """A finished command: its exit code, the JSON last line of stdout, and all it wrote."""

    code: int
    last: dict[str, Any]
    output: str


def run(command: str, fills: dict[str, list[str]], env: dict[str, str] | None = None) -> Ran:
    """README's `command`, placeholders filled, from the repository's root, the venv's
    programs first on PATH and no RECOVERY_ or PYSPARK_ variable but those given."""
    how = invocation(command, fills)
    base = {k: v for k, v in os.environ.items() if not k.startswith(("RECOVERY_", "PYSPARK_"))}
    full = {**base, "PATH": f"{VENV_BIN}:{os.environ['PATH']}", **how.env, **(env or {})}
    done = subprocess.run(how.argv, cwd=ROOT, env=full, capture_output=True, text=True,
                          timeout=900)
    lines = done.stdout.strip().splitlines()
    try:
        last = json.loads(lines[-1]) if lines else {}
    except json.JSONDecodeError:
        last = {}
    return Ran(done.returncode, last, (done.stdout + done.stderr)[-4000:])


@pytest.fixture(scope="module")
def server() -> Iterator[LocalServer]:
    """One Redis for every command here; each test works on its own streams."""
    srv = start_server("redis")
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def client(server: LocalServer) -> Redis:
    return server.client()


def stuck(client: Redis, stream: str, ok: int = 10, over: int = 3) -> tuple[list[str], list[str]]:
    """`ok` entries idle an hour, delivered once, and `over` delivered 9 times (past the
    default limit of 5), all pending on consumer ``crashed`` of GROUP: (ok IDs, over IDs)."""
    create_group(client, stream, GROUP)
    ids = add_entries(client, stream, ok + over, lambda i: {"n": str(i)})
    assert deliver(client, stream, GROUP, "crashed", len(ids)) == ids
    make_stuck(client, stream, GROUP, "crashed", ids[:ok], HOUR_MS)
    make_stuck(client, stream, GROUP, "crashed", ids[ok:], HOUR_MS, delivery_count=9)
    return ids[:ok], ids[ok:]


def pending(client: Redis, stream: str) -> dict[str, str]:
    """The PEL of (stream, GROUP): entry ID -> owning consumer."""
    rows = client.xpending_range(stream, GROUP, "-", "+", 10_000)
    return {r["message_id"].decode(): r["consumer"].decode() for r in rows}


def letters(client: Redis, dead_letter_stream: str) -> list[str]:
    """The source IDs (``x-original-id``) of the letters in `dead_letter_stream`."""
    return sorted(f[b"x-original-id"].decode() for _, f in client.xrange(dead_letter_stream))


def job_options(server: LocalServer, tmp: Path, stream: str) -> list[str]:
    """The installed command's [options]: this server, `stream`, a temp report directory."""
    return ["--set", f"redis.url={server.url}", "--set", f"streams.keys={stream}",
            "--set", f"report.path={tmp / 'reports'}", "--set", f"handler.path={HANDLER}"]


def installed(server: LocalServer, tmp: Path, stream: str, *more: str,
              spark: list[str] = SPARK_OPTIONS) -> dict[str, list[str]]:
    """Fills for an INSTALLED command on `stream` (`spark`: its spark-submit options)."""
    return {"options": job_options(server, tmp, stream), "-- spark-submit options": spark,
            **({"PLAN": list(more)} if more else {})}


def test_every_readme_command_runs_in_a_test() -> None:
    shown, covered = set(README_COMMANDS), set(RUN_BY) | set(COVERED_BY)
    assert not shown - covered, (
        "README shows commands no test runs: " + "; ".join(sorted(shown - covered)) +
        ": add a test to tests/integration/test_readme_commands.py marked @runs(<the command>)")
    assert not covered - shown, (
        "tests run commands README no longer shows: " + "; ".join(sorted(covered - shown)))
    assert all(COVERED_BY[c][0] in RUN_BY for c in COVERED_BY)


@spark_run
@runs(SUBMIT)
def test_spark_submit_with_the_shipped_config(server, client, tmp_path):
    """The file's ``streams.keys = ["orders"]``, the ``--set`` over the file's 60 s idle time:
    entries idle 5 minutes stay with their owner. The environment names the server, the
    report directory and the handler (the shipped file names none)."""
    ok, over = stuck(client, "orders")
    recent = add_entries(client, "orders", 4, lambda i: {"n": f"r{i}"})
    assert deliver(client, "orders", GROUP, "crashed", 4) == recent
    make_stuck(client, "orders", GROUP, "crashed", recent, 300_000)
    launcher = invocation(VENV_SUBMIT, {}).env
    ran = run(SUBMIT, {}, {**launcher, "RECOVERY_REDIS__URL": server.url,
                           "RECOVERY_REPORT__PATH": str(tmp_path / "reports"),
                           "RECOVERY_HANDLER__PATH": HANDLER})
    assert ran.code == 0, ran.output
    assert (ran.last["status"], ran.last["exit_code"]) == ("ok", 0)
    assert ran.last["totals"]["reprocessed"] == len(ok)
    assert ran.last["totals"]["dead_lettered"] == len(over)
    assert pending(client, "orders") == dict.fromkeys(recent, "crashed")
    assert letters(client, "{orders}:dlq") == sorted(over)


@spark_run
@runs(INSTALLED.format("run"))
def test_installed_run(server, client, tmp_path):
    ok, over = stuck(client, "inst:run")
    ran = run(INSTALLED.format("run"), installed(server, tmp_path, "inst:run"))
    assert ran.code == 0, ran.output
    assert (ran.last["totals"]["reprocessed"], ran.last["totals"]["dead_lettered"]) == (10, 3)
    assert pending(client, "inst:run") == {}
    assert letters(client, "{inst:run}:dlq") == sorted(over)
    assert client.xlen("inst:run") == len(ok) + len(over)  # acked, never deleted


@dataclass
class DryRun:
    """The installed dry run, and Redis as it left it."""

    ran: Ran
    ok: list[str]
    over: list[str]
    pel_after: dict[str, str]
    consumers_after: list[str]


@pytest.fixture(scope="module")
def dry_run(server: LocalServer, client: Redis, tmp_path_factory: pytest.TempPathFactory
            ) -> DryRun:
    """One dry run, shared by its test and by ``apply PLAN`` (which applies its plan)."""
    ok, over = stuck(client, "inst:plan")
    tmp = tmp_path_factory.mktemp("plan")
    ran = run(INSTALLED.format("dry-run"), installed(server, tmp, "inst:plan"))
    consumers = [c["name"].decode() for c in client.xinfo_consumers("inst:plan", GROUP)]
    return DryRun(ran, ok, over, pending(client, "inst:plan"), consumers)


@spark_run
@runs(INSTALLED.format("dry-run"))
def test_installed_dry_run(dry_run):
    ran = dry_run.ran
    assert ran.code == 0, ran.output
    assert ran.last["dry_run"] is True
    assert (ran.last["totals"]["would_reprocess"], ran.last["totals"]["would_dead_letter"]) == \
        (len(dry_run.ok), len(dry_run.over))
    assert dry_run.pel_after == dict.fromkeys(dry_run.ok + dry_run.over, "crashed")
    assert dry_run.consumers_after == ["crashed"]  # no consumer created


@spark_run
@runs(INSTALLED.format("apply PLAN"))
def test_installed_apply(server, client, dry_run, tmp_path):
    plan = dry_run.ran.last["report_path"]
    ran = run(INSTALLED.format("apply PLAN"), installed(server, tmp_path, "inst:plan", plan))
    assert ran.code == 0, ran.output
    assert ran.last["plan"] == plan
    assert (ran.last["totals"]["reprocessed"], ran.last["totals"]["dead_lettered"]) == \
        (len(dry_run.ok), len(dry_run.over))
    assert pending(client, "inst:plan") == {}
    assert letters(client, "{inst:plan}:dlq") == sorted(dry_run.over)


def letters_of(client: Redis, stream: str, reasons: list[str]) -> list[str]:
    """`stream` with GROUP, and one dead letter per reason made by the real move script:
    their source IDs."""
    create_group(client, stream, GROUP)
    return dead_letter(client, stream, GROUP, [{b"n": str(i).encode()} for i in range(
        len(reasons))], reasons)


@pytest.mark.slow
@runs(INSTALLED.format("redrive"))
def test_installed_redrive(server, client, tmp_path):
    """With only a local master after ``--`` the redrive runs in the command's own Python and
    starts no Spark (README, "Where the installed command runs a job"): under a SPARK_HOME
    whose spark-submit only says it started (no JVM), neither spark-submit nor a local
    PySpark session (which launches its JVM through it) could run it. RedriveJob under
    spark-submit is tests/integration/test_packaging.py's (``jobs/redrive.py`` from the
    wheel); the command's hand-over to spark-submit is the other installed commands' here."""
    sources = letters_of(client, "inst:redrive", ["max-deliveries-exceeded"] * 4)
    ran = run(INSTALLED.format("redrive"), installed(server, tmp_path, "inst:redrive",
                                                     spark=["--", "--master", "local[2]"]),
              {"SPARK_HOME": str(stub_spark_home(tmp_path))})
    assert ran.code == 0, ran.output
    assert STARTED not in ran.output
    assert ran.last["totals"]["redriven"] == len(sources)
    assert client.xlen("{inst:redrive}:dlq") == 0
    back = client.xrange("inst:redrive", f"({sources[-1]}", "+")
    assert sorted(f[b"n"] for _, f in back) == [b"0", b"1", b"2", b"3"]
    assert all(f[b"x-redrive-count"] == b"1" for _, f in back)


@spark_run
@runs(INSTALLED.format("dead-letters"))
def test_installed_dead_letters(server, client, tmp_path):
    reasons = ["max-deliveries-exceeded", "handler-rejected", "handler-rejected"]
    letters_of(client, "inst:letters", reasons)
    before = client.xrange("{inst:letters}:dlq")
    ran = run(INSTALLED.format("dead-letters"), installed(server, tmp_path, "inst:letters"))
    assert ran.code == 0, ran.output
    assert ran.last["totals"]["dead_letters"] == len(reasons)
    assert client.xrange("{inst:letters}:dlq") == before  # read-only without retention
    assert (Path(ran.last["report_path"]) / "by_reason").is_dir()


@runs(CONFIG)
def test_installed_config(server, client):
    """The effective settings, the file and ``--set`` merged; Redis never contacted."""
    connections = client.info("stats")["total_connections_received"]
    ran = run(CONFIG, {"FILE": ["conf/recovery.toml"], "--set section.field=value": [
        "--set", "claim.count=777", "--set", f"redis.url={server.url}"]})
    assert ran.code == 0, ran.output
    assert ran.last["claim"]["count"] == 777
    assert ran.last["streams"]["keys"] == ["orders"]  # from the file
    assert ran.last["redis"]["url"] == server.url
    assert client.info("stats")["total_connections_received"] == connections


@runs("redis-stream-recovery init")
def test_installed_init(tmp_path):
    """README's first step: in an empty folder, ``init`` writes the commented config, the
    same bytes as the checked conf/recovery.toml; a second ``init`` overwrites nothing
    (exit 2) and leaves the file as it was."""
    init = [str(VENV_BIN / "redis-stream-recovery"), "init"]
    done = subprocess.run(init, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    written = tmp_path / "conf" / "recovery.toml"
    assert written.read_bytes() == (ROOT / "conf" / "recovery.toml").read_bytes()
    written.write_text("# mine\n")
    again = subprocess.run(init, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert again.returncode == 2, again.stderr
    assert written.read_text() == "# mine\n"
