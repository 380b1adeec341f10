"""``python -m recovery``: the ``redis-stream-recovery`` command (:mod:`recovery.cli.main`)."""

import sys

from recovery.cli.main import main

sys.exit(main())
