"""The console's fixtures: a console over the test's Redis (tests/support/console_tools.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from recovery.console.state import ConsoleState
from recovery.testing.local_redis import LocalServer
from tests.support.console_tools import state_for


@pytest.fixture
def state(redis_server: LocalServer) -> Iterator[ConsoleState]:
    found = state_for(redis_server)
    yield found
    found.close()
