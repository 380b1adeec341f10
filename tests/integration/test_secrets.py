"""The Redis password never leaves the job: a real spark-submit run, every output grepped.

Each run gets a recognisable password, given the way README recommends
(``RECOVERY_REDIS__PASSWORD``), and then the password is searched for in: stdout, stderr, the
report (raw Parquet bytes and every decoded value), the Spark event log (what the Spark UI and
History Server show; zstd-compressed by default in Spark 4) and the command line of every
process spark-submit spawned (the JVM, the Python driver, the Python workers), sampled while
they run. A failing run (wrong password, unreachable server, a permission missing on the
executors) must leak nothing either.

The password also sits in a Spark property, ``spark.kubernetes.driverEnv.RECOVERY_REDIS__PASSWORD``
(how a Kubernetes driver pod commonly gets its environment): Spark's redaction
(``spark.redaction.regex``, which matches "password" by default) must keep it out of the event log.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import zstandard

from recovery.spark.local import LOCAL_JVM_OPTIONS
from recovery.spark.pyspark_path import DAEMON_MODULE
from recovery.testing.local_redis import LocalServer, free_port
from tests.support.backlogs import seed
from tests.support.invariants import final_states
from tests.support.servers import start_server

pytestmark = pytest.mark.slow  # real spark-submit runs

ROOT = Path(__file__).resolve().parents[2]
VENV_BIN = ROOT / ".venv" / "bin"
# Neither holds a word of Spark's redaction regex (secret, password, token, ...): Spark redacts
# any value that does, which would hide a leak from this test.
PASSWORD = "Zebra-7f3a-canary-4711q"
WRONG_PASSWORD = "Okapi-91c2-wrong-0815q"
SUBMIT_TIMEOUT_S = 240


@dataclass
class ProcessWatch:
    """Samples the command lines (argv) and environments of `root` and all its descendants
    until stopped: every distinct (pid, bytes) seen, as a pid's argv changes with exec."""

    root: int
    cmdlines: set[tuple[int, bytes]] = field(default_factory=set)
    environs: set[tuple[int, bytes]] = field(default_factory=set)
    _stop: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            for pid in _descendants(self.root):
                with contextlib.suppress(OSError):  # exited meanwhile
                    self.cmdlines.add((pid, Path(f"/proc/{pid}/cmdline").read_bytes()))
                    self.environs.add((pid, Path(f"/proc/{pid}/environ").read_bytes()))
            time.sleep(0.05)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def _descendants(root: int) -> set[int]:
    parents: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            # "pid (comm) state ppid ...": comm may hold spaces, so split after the last ')'
            text = stat.read_text()
            parents[int(stat.parent.name)] = int(text.rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
    found, frontier = {root}, {root}
    while frontier:
        frontier = {p for p, pp in parents.items() if pp in frontier} - found
        found |= frontier
    return found


@dataclass
class Submitted:
    """What one spark-submit run left behind."""

    code: int
    stdout: str
    stderr: str
    cmdlines: set[tuple[int, bytes]]
    environs: set[tuple[int, bytes]]
    event_log: bytes
    report: bytes

    @property
    def summary(self) -> dict:
        return json.loads(self.stdout.strip().splitlines()[-1])

    def places_holding(self, secret: str, environments: bool = False) -> list[str]:
        """Names of the outputs that contain `secret` (empty: none leaks it); with
        `environments`, the processes' environments count too."""
        needle = secret.encode()
        places = [name for name, blob in (
            ("stdout", self.stdout.encode()), ("stderr", self.stderr.encode()),
            ("event log", self.event_log), ("report", self.report)) if needle in blob]
        places += [f"cmdline of pid {pid}: {cmd[:120]!r}"
                   for pid, cmd in sorted(self.cmdlines) if needle in cmd]
        if environments:
            places += [f"environment of pid {pid}" for pid, env in sorted(self.environs)
                       if needle in env]
        return places


def spark_submit(tmp: Path, config: str, env: dict[str, str]) -> Submitted:
    """Run jobs/recover.py under a real spark-submit (local[2], event log on)."""
    events, reports = tmp / "events", tmp / "reports"
    events.mkdir()
    toml = tmp / "recovery.toml"
    toml.write_text(config + f'\n[report]\npath = "{reports}"\n')
    props = tmp / "spark.properties"
    props.write_text(f"spark.kubernetes.driverEnv.RECOVERY_REDIS__PASSWORD {PASSWORD}\n")
    cmd = [str(VENV_BIN / "spark-submit"), "--master", "local[2]",
           "--properties-file", str(props),
           "--conf", "spark.eventLog.enabled=true", "--conf", f"spark.eventLog.dir={events}",
           "--conf", "spark.ui.enabled=false", "--driver-java-options", LOCAL_JVM_OPTIONS,
           str(ROOT / "jobs" / "recover.py"), "--config", str(toml)]
    child_env = {**os.environ, "PYSPARK_PYTHON": str(VENV_BIN / "python"), **env}
    proc = subprocess.Popen(cmd, cwd=tmp, env=child_env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    watch = ProcessWatch(proc.pid)
    try:
        stdout, stderr = proc.communicate(timeout=SUBMIT_TIMEOUT_S)
    finally:
        watch.stop()
        if proc.poll() is None:
            proc.kill()
    return Submitted(proc.returncode, stdout, stderr, watch.cmdlines, watch.environs,
                     _read_event_logs(events), _read_report(reports))


def _read_event_logs(directory: Path) -> bytes:
    """Every event log file under `directory`, decompressed (Spark 4 writes zstd)."""
    blobs = []
    for path in sorted(p for p in directory.rglob("*") if p.is_file()):
        data = path.read_bytes()
        if path.suffix == ".zstd":
            data = zstandard.ZstdDecompressor().stream_reader(data).read()
        blobs.append(data)
    return b"\n".join(blobs)


def _read_report(directory: Path) -> bytes:
    """Raw bytes of every report file plus every decoded Parquet value (compression aside)."""
    blobs = []
    for path in sorted(p for p in directory.rglob("*") if p.is_file()):
        blobs.append(path.read_bytes())
        if path.suffix == ".parquet":
            blobs.append(repr(pq.read_table(path).to_pylist()).encode())
    return b"\n".join(blobs)


def job_config(url: str, username: str | None = None, password_file: Path | None = None
               ) -> str:
    user = f'username = "{username}"\n' if username else ""
    if password_file is not None:
        user += f'password_file = "{password_file}"\n'
    return (f'[redis]\nurl = "{url}"\n{user}connect_timeout_s = 2\n'
            '[streams]\nkeys = ["orders"]\n'
            '[claim]\ncount = 50\nmin_idle_ms = 1800000\n'
            '[handler]\npath = "tests.support.handlers:verify_or_fail"\n')


@pytest.fixture
def locked_server() -> Iterator[LocalServer]:
    """Redis 7.0 that wants PASSWORD (default user), and a user 'recovery' that may do
    everything but XAUTOCLAIM (so the run fails on the executors, not on the driver)."""
    srv = start_server("redis", "--requirepass", PASSWORD)
    srv.client(password=PASSWORD).acl_setuser(
        "recovery", enabled=True, passwords=[f"+{PASSWORD}"], keys=["*"],
        commands=["+@all", "-xautoclaim"])
    yield srv
    srv.stop()


def test_a_full_run_leaks_the_password_nowhere(locked_server, tmp_path):
    client = locked_server.client(password=PASSWORD)
    seeded = seed(client, ["orders"], ["billing"])
    ran = spark_submit(tmp_path, job_config(locked_server.url),
                       {"RECOVERY_REDIS__PASSWORD": PASSWORD})

    assert ran.code == 0, ran.stderr[-3000:]
    assert ran.summary["totals"]["reprocessed"] == 120
    states = final_states(client, {k: v for k, v in seeded.state.items() if v != "gone"})
    assert list(states.values()).count("acked") == 120  # the run really talked to Redis
    assert b"SparkListenerSQLExecutionStart" in ran.event_log
    assert b"RECOVERY_REDIS__PASSWORD" in ran.event_log  # the property is there, redacted
    commands = [cmd for _, cmd in ran.cmdlines]
    assert any(cmd.split(b"\0")[0].endswith(b"/java") for cmd in commands)  # after exec
    assert any(DAEMON_MODULE.encode() in cmd for cmd in commands)  # and the Python workers
    assert ran.places_holding(PASSWORD) == []


@pytest.mark.parametrize("case", ["wrong password", "unreachable", "permission missing"])
def test_a_failing_run_leaks_the_password_nowhere(case, locked_server, tmp_path):
    """The wrong password comes from redis.password_file: then it is not even in the
    environment of any process."""
    seed(locked_server.client(password=PASSWORD), ["orders"], ["billing"])
    url, user, secret = locked_server.url, None, PASSWORD
    env, password_file = {"RECOVERY_REDIS__PASSWORD": secret}, None
    if case == "wrong password":
        secret, env = WRONG_PASSWORD, {}
        password_file = tmp_path / "secret" / "redis-password"
        password_file.parent.mkdir()
        password_file.write_text(WRONG_PASSWORD + "\n")
    elif case == "unreachable":
        url = f"redis://127.0.0.1:{free_port()}/0"
    else:
        user = "recovery"
    ran = spark_submit(tmp_path, job_config(url, user, password_file), env)

    assert ran.code == 1, ran.stderr[-3000:]
    # PySpark's PythonRunner merges the Python driver's stderr into stdout.
    output = ran.stdout + ran.stderr
    errors = [line for line in output.splitlines() if line.startswith("error: ")]
    expected = {"wrong password": "refused the login",
                "unreachable": "cannot reach Redis",
                "permission missing": "may not run XAUTOCLAIM"}[case]
    assert len(errors) == 1 and expected in errors[0], output[-3000:]
    assert ran.summary["status"] in ("error", "failed")
    assert ran.places_holding(secret, environments=password_file is not None) == []
    assert ran.places_holding(PASSWORD) == []
