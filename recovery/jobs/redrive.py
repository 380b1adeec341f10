"""Move dead letters back to their source streams: the spark-submit entry point.

    spark-submit jobs/redrive.py --config conf/recovery.toml [--dry-run] \
        [--set redrive.reasons=handler-failed-at-limit] [--set redrive.limit=1000]

Sources are ``streams.keys`` / ``streams.match``, filters and rate the ``[redrive]`` section.
Exit codes: 0 success, 2 invalid config or arguments, 1 anything else. The last line of
stdout is a JSON summary. The work runs on the driver, inside Redis (see recovery/redrive/run.py).
"""

from __future__ import annotations

import os
import sys

from recovery.cli.redrive import redrive_main


def register_with_cluster() -> None:
    """Under spark-submit, start the SparkSession, so the cluster manager sees a running
    application (YARN cluster mode fails a driver that never creates one). Run with plain
    ``python`` (cron, tests), no JVM is started."""
    if os.environ.get("PYSPARK_GATEWAY_PORT"):
        from pyspark.sql import SparkSession

        SparkSession.builder.appName("redis-stream-redrive").getOrCreate()


def main(argv: list[str] | None = None) -> int:
    return redrive_main(argv, register_with_cluster)


if __name__ == "__main__":
    sys.exit(main())
