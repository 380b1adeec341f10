"""The checkout's spark-submit entry point: the job is ``recovery.jobs.redrive.RedriveJob``
(its module's doc says what it does), whose module an installed package submits itself.

    spark-submit jobs/redrive.py --config conf/recovery.toml ...
"""

from __future__ import annotations

import sys

from recovery.jobs.redrive import RedriveJob

if __name__ == "__main__":
    sys.exit(RedriveJob().main())
