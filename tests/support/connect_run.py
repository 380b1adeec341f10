"""Run the job under Spark Connect, against one local Connect server shared by the tests.

``python -m tests.support.connect_run serve <fd>`` starts a local Connect server
(``remote("local[2]")``, on a free port), writes the port's number to file descriptor `fd` and
serves until its stdin closes; ``python -m tests.support.connect_run <connect url> <redis url>
<report dir> [section.field=value ...]`` runs the job as a client of it (the overrides
replace the defaults below where they name the same setting) and prints the run's JSON summary
as the last line.
``ConnectServer`` (the ``connect_server`` fixture) starts the one and runs the other.

Both in processes of their own: a Connect session cannot share a process with the suite's
classic session. Each run is a session of its own on the server (its own conf).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from pyspark.sql import SparkSession

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "SPARK_CONNECT_AUTHENTICATE_TOKEN"  # the server's, which its clients send


def serve(port_fd: int) -> int:
    """A local Connect server (a classic ``local[2]`` session with Spark Connect's plugin, as
    ``remote("local[2]")`` starts one) on a free port: its number written to `port_fd` (then
    closed); it serves until stdin closes. Clients send its token (``TOKEN``, environment)."""
    from recovery.spark.local import local_session

    spark = local_session("local[2]", "recovery-connect-tests", **{
        "spark.plugins": "org.apache.spark.sql.connect.SparkConnectPlugin",
        "spark.sql.artifact.isolation.enabled": "true",
        "spark.sql.artifact.isolation.alwaysApplyClassloader": "true",
        "spark.connect.grpc.binding.port": "0"})
    service = getattr(spark._jvm, "org.apache.spark.sql.connect.service.SparkConnectService$")
    with os.fdopen(port_fd, "w") as out:
        out.write(str(getattr(service, "MODULE$").localPort()))
    sys.stdin.read()
    spark.stop()
    return 0


def main(connect_url: str, url: str, reports: str, *overrides: str) -> int:
    from recovery.driver.job import run
    from recovery.settings.model import load_settings

    spark = SparkSession.builder.remote(connect_url).getOrCreate()
    assert type(spark).__module__.startswith("pyspark.sql.connect"), type(spark)
    settings = load_settings(None, [
        f"redis.url={url}", f"report.path={reports}", "streams.match=*", "claim.count=7",
        "claim.min_idle_ms=600000", "handler.path=tests.support.handlers:verify_or_fail",
        *overrides])
    summary = run(spark, settings)
    print(summary.json_line())
    spark.stop()
    return 0


class ConnectServer:
    """``serve`` in a process of its own, started on first use: ``run`` runs the job as its
    client, in a process of its own."""

    def __init__(self, log: Path) -> None:
        self.proc: subprocess.Popen[str] | None = None
        self.env = {**os.environ, TOKEN: os.urandom(16).hex()}
        self.log = log

    def start(self) -> ConnectServer:
        read, write = os.pipe()
        with self.log.open("w") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "tests.support.connect_run", "serve", str(write)],
                cwd=ROOT, env=self.env, stdin=subprocess.PIPE, stdout=log,
                stderr=subprocess.STDOUT, text=True, pass_fds=(write,))
        os.close(write)
        with os.fdopen(read) as port:
            number = port.read()  # until it serves, or "" if it died first
        assert number, f"the Connect server did not start: {self.log.read_text()[-3000:]}"
        self.url = f"sc://localhost:{int(number)}"
        return self

    def run(self, url: str, reports: Path, *overrides: str) -> subprocess.CompletedProcess[str]:
        """The job against Redis `url` as a client of this server."""
        return subprocess.run(
            [sys.executable, "-m", "tests.support.connect_run", self.url, url, str(reports),
             *overrides], capture_output=True, text=True, timeout=240, cwd=ROOT, env=self.env)

    def stop(self) -> None:
        if self.proc is None:
            return
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


if __name__ == "__main__":
    sys.exit(serve(int(sys.argv[2])) if sys.argv[1] == "serve" else main(*sys.argv[1:]))
