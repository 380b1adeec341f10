"""The checkout's spark-submit entry point: the job is ``recovery/jobs/dead_letters.py`` (its doc
says what it does), which an installed package also carries.

    spark-submit jobs/dead_letters.py --config conf/recovery.toml ...
"""

from __future__ import annotations

import sys

from recovery.jobs.dead_letters import main

if __name__ == "__main__":
    sys.exit(main())
