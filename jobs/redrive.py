"""The checkout's spark-submit entry point: the job is ``recovery/jobs/redrive.py`` (its doc
says what it does), which an installed package also carries.

    spark-submit jobs/redrive.py --config conf/recovery.toml ...
"""

from __future__ import annotations

import sys

from recovery.jobs.redrive import main

if __name__ == "__main__":
    sys.exit(main())
