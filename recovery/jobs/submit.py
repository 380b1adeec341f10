"""Kept for compatibility (``python -m recovery.jobs.submit``, ``recovery.jobs.submit:main``
in users' scripts and older installs' entry points): the ``redis-stream-recovery`` command is
:mod:`recovery.cli.main`."""

from __future__ import annotations

import sys

from recovery.cli.main import main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())
