"""Move dead letters back to their source streams: the spark-submit entry point.

    spark-submit jobs/redrive.py --config conf/recovery.toml [--dry-run] \
        [--set redrive.reasons=handler-failed-at-limit] [--set redrive.limit=1000]

Sources are ``streams.keys`` / ``streams.match``, filters and rate the ``[redrive]`` section.
Exit codes: 0 success, 2 invalid config or arguments, 1 anything else. The last line of
stdout is a JSON summary. The work runs on the driver, inside Redis (see recovery/redrive/run.py).
"""

from __future__ import annotations

import _thread
import os
import sys
import threading
import time

from recovery.cli.redrive import redrive_main

PARENT_POLL_S = 0.5  # how often the driver looks whether spark-submit's JVM still runs


def register_with_cluster() -> None:
    """Under spark-submit, start the SparkSession, so the cluster manager sees a running
    application (YARN cluster mode fails a driver that never creates one), and end the
    redrive as Ctrl-C does once that JVM is gone (:func:`stop_with_parent`). Run with plain
    ``python`` (cron, tests), no JVM is started."""
    if os.environ.get("PYSPARK_GATEWAY_PORT"):
        from pyspark.sql import SparkSession

        SparkSession.builder.appName("redis-stream-redrive").getOrCreate()
        stop_with_parent()


def stop_with_parent() -> None:
    """A SIGTERM to spark-submit (a scheduler's timeout, ``kill``) ends its JVM, and Spark's
    PythonRunner leaves this driver running, orphaned, moving letters no one waits for. A
    daemon thread looks every PARENT_POLL_S seconds whether the parent changed and then
    interrupts the main thread: the redrive stops between two atomic moves and reports
    "interrupted", exit 1."""
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(PARENT_POLL_S)
        _thread.interrupt_main()

    threading.Thread(target=watch, daemon=True, name="parent-watch").start()


def main(argv: list[str] | None = None) -> int:
    return redrive_main(argv, register_with_cluster)


if __name__ == "__main__":
    sys.exit(main())
