"""The checkout's spark-submit entry point: the job is ``recovery.jobs.dead_letters.DeadLettersJob``
(its module's doc says what it does), whose module an installed package submits itself.

    spark-submit jobs/dead_letters.py --config conf/recovery.toml ...
"""

from __future__ import annotations

import sys

from recovery.jobs.dead_letters import DeadLettersJob

if __name__ == "__main__":
    sys.exit(DeadLettersJob().main())
