"""The checkout's spark-submit entry point: the job is ``recovery.jobs.recover.RecoverJob``
(its module's doc says what it does), whose module an installed package submits itself.

    spark-submit jobs/recover.py --config conf/recovery.toml ...
"""

from __future__ import annotations

import sys

from recovery.jobs.recover import RecoverJob

if __name__ == "__main__":
    sys.exit(RecoverJob().main())
