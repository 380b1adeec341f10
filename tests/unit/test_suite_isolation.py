"""What each pytest process keeps to itself: the files that steer the executors of its own
Spark session (tests/conftest.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# A controller that imported tests.support.fault_tools (pytest loads the conftest.py of the
# folders it is given: `pytest -n 4 tests/integration/faults`), then a worker it starts.
CONTROLLER = """
import subprocess, sys
import tests.support.fault_tools
worker = "import os, tests.conftest; print(os.getpid(), os.environ[{env!r}])"
print(subprocess.run([sys.executable, "-c", worker], capture_output=True, text=True,
                     check=True).stdout)
"""


def test_each_pytest_process_steers_its_handlers_through_its_own_control_file() -> None:
    """Seen before the fix: under `pytest -n 4 tests/integration/faults`, every worker's
    recording handler read the controller's control file, so a test's calls were recorded in
    another worker's Redis and 21 of 30 fault trials failed."""
    from tests.support.handlers import CONTROL_ENV

    done = subprocess.run([sys.executable, "-c", CONTROLLER.format(env=CONTROL_ENV)],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    pid, path = done.stdout.split()
    assert path == f"/tmp/recovery-test-handler-{pid}.json"
