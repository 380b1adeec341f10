"""``python -m recovery``: the ``redis-stream-recovery`` command (:mod:`recovery.jobs.submit`)."""

import sys

from recovery.jobs.submit import main

sys.exit(main())
