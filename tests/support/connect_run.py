"""Run the job under Spark Connect:
``python -m tests.support.connect_run <redis url> <report dir> [section.field=value ...]``
(the overrides replace the defaults below where they name the same setting).

Used by test_end_to_end in a subprocess, since a Connect session cannot share a process with
the suite's classic session. Prints the run's JSON summary as the last line.
"""

from __future__ import annotations

import sys

from pyspark.sql import SparkSession

from recovery.driver.job import run
from recovery.settings.model import load_settings


def main(url: str, reports: str, *overrides: str) -> int:
    spark = SparkSession.builder.remote("local[2]").getOrCreate()
    assert type(spark).__module__.startswith("pyspark.sql.connect"), type(spark)
    settings = load_settings(None, [
        f"redis.url={url}", f"report.path={reports}", "streams.match=*", "claim.count=7",
        "claim.min_idle_ms=600000", "handler.path=tests.support.handlers:verify_or_fail",
        *overrides])
    summary = run(spark, settings)
    print(summary.json_line())
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
