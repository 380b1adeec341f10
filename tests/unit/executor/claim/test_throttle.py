"""The claim's rate cap (recovery.executor.claim.throttle): it sleeps just enough to keep to
claim.max_entries_per_s, on an injected clock."""

from __future__ import annotations

import pytest

from recovery.executor.claim.throttle import Throttle


def test_throttle_sleeps_to_the_cap():
    now = [0.0]
    slept: list[float] = []

    def sleep(s: float) -> None:
        slept.append(s)
        now[0] += s

    throttle = Throttle(100.0, clock=lambda: now[0], sleep=sleep)
    throttle.take(50)
    throttle.take(50)
    assert now[0] == pytest.approx(1.0)
