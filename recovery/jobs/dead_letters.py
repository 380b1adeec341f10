"""Read the dead-letter streams as data: grouped by cause and by error signature, with
warnings on their length and age. Read-only unless the opt-in retention
(``dead_letters.max_age_s`` / ``max_length``) is on: then it trims the letters past a limit.

    spark-submit jobs/dead_letters.py --config conf/recovery.toml \
        [--set dead_letters.warn_length=10000] [--set streams.match=orders:*]

The dead-letter streams are those of the streams ``streams.keys`` / ``streams.match`` select.
Views go to ``<report.path>/dead_letters/run_id=<run id>/`` (``by_reason/``,
``by_signature/``). Exit codes: 0 success, 2 invalid config or arguments, 1 anything else.
The last line of stdout is a JSON summary.
"""

from __future__ import annotations

import sys

from recovery.spark.pyspark_path import prefer_installed_pyspark

prefer_installed_pyspark()  # before the first pyspark import

from recovery.cli.dead_letters import dead_letters_main  # noqa: E402
from recovery.spark.session import submitted_session  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    return dead_letters_main(argv, lambda: submitted_session("redis-stream-dead-letters"))


if __name__ == "__main__":
    sys.exit(main())
