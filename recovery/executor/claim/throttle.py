"""A per-partition rate cap, so a big backlog never starves Redis."""

from __future__ import annotations

import time
from collections.abc import Callable


class Throttle:
    """Blocks so that at most `rate_per_s` units pass per second on average.

    `rate_per_s` None means no cap. Sleeping, not busy waiting; `clock` and `sleep` are
    injectable for tests.
    """

    def __init__(self, rate_per_s: float | None,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.rate = rate_per_s
        self._clock = clock
        self._sleep = sleep
        self._start = clock()
        self._passed = 0.0

    def take(self, units: int) -> None:
        """Account for `units` (entries) and sleep until they fit under the cap."""
        if self.rate is None:
            return
        self._passed += units
        due = self._start + self._passed / self.rate
        delay = due - self._clock()
        if delay > 0:
            self._sleep(delay)
