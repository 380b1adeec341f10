"""Recover stuck Redis Streams messages: the spark-submit entry point.

    spark-submit jobs/recover.py --config conf/recovery.toml [--set claim.min_idle_ms=60000]

Exit codes: 0 success, 2 invalid config or arguments, 1 anything else. The last line of
stdout is a JSON summary of the run.
"""

from __future__ import annotations

import sys

from pyspark.sql import SparkSession

from recovery.cli import run_recovery
from recovery.config import Settings


def build_session(settings: Settings) -> SparkSession:
    """The submitter decides the master; the job only names itself."""
    return SparkSession.builder.appName("redis-stream-recovery").getOrCreate()


def main(argv: list[str] | None = None) -> int:
    return run_recovery(argv, build_session)


if __name__ == "__main__":
    sys.exit(main())
