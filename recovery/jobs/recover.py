"""Recover stuck Redis Streams messages: the spark-submit entry point.

    spark-submit jobs/recover.py --config conf/recovery.toml [--set claim.min_idle_ms=60000]
    spark-submit jobs/recover.py --config conf/recovery.toml --dry-run
    spark-submit jobs/recover.py --config conf/recovery.toml \
        --plan reports/entries/run_id=<the dry run's id>     # exactly that dry run's plan

Exit codes: 0 success, 2 invalid config or arguments, 1 anything else. The last line of
stdout is a JSON summary of the run.
"""

from __future__ import annotations

import sys

from recovery.spark.pyspark_path import prefer_installed_pyspark

prefer_installed_pyspark()  # before the first pyspark import

from pyspark.sql import SparkSession  # noqa: E402

from recovery.cli.recover import run_recovery  # noqa: E402
from recovery.settings.model import Settings  # noqa: E402
from recovery.spark.session import submitted_session  # noqa: E402


def build_session(settings: Settings) -> SparkSession:
    """The submitter decides the master (``recovery.spark.session.submitted_session``)."""
    return submitted_session("redis-stream-recovery")


def main(argv: list[str] | None = None) -> int:
    return run_recovery(argv, build_session)


if __name__ == "__main__":
    sys.exit(main())
