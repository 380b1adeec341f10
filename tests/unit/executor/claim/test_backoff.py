"""The claim's backoff schedule (recovery.executor.claim.backoff) as the dry run applies it:
an entry delivered `k` times waits ``min_idle_ms * factor^(k-1)``, at most the cap; one
whose next delivery is over the limit, or that the job's consumer owns, waits only
``min_idle_ms``; a negative idle time (Redis 8.8's XNACK) is due now. Pure (the same rule
inside Redis, claim_due.lua: tests/unit/executor/claim/test_loop.py)."""

from __future__ import annotations

import pytest

from recovery.executor.claim.backoff import NotDue, due_in_ms, wait_ms
from recovery.settings.model import executor_params, load_settings

MINUTES_10 = 600_000
PARAMS = executor_params(load_settings(None, [
    "streams.keys=s", f"claim.min_idle_ms={MINUTES_10}", "claim.backoff_factor=2",
    "claim.backoff_max_ms=2000000", "claim.max_deliveries=5"]), "r")


@pytest.mark.parametrize(("count", "own", "wait"), [
    (0, False, MINUTES_10), (1, False, MINUTES_10),
    (2, False, 2 * MINUTES_10), (3, False, 2_000_000),  # 40 min, capped at 2,000 s
    (4, False, 2_000_000), (4, True, MINUTES_10),  # the job's own: no wait of its own
    (5, False, MINUTES_10), (2**63 - 1, False, MINUTES_10),  # over the limit next: due now
])
def test_each_count_waits_its_own_time_capped(count: int, own: bool, wait: int) -> None:
    """Catches the exponent off by one, a cap not applied (or an overflow at a huge count),
    and an entry bound for the dead-letter stream kept waiting."""
    assert wait_ms(PARAMS, count, own) == wait


def test_due_in_rounds_up_and_a_given_up_entry_is_due_now() -> None:
    assert due_in_ms(PARAMS, 2, 2 * MINUTES_10) == 0
    assert due_in_ms(PARAMS, 2, 2 * MINUTES_10 - 1) == 1
    assert due_in_ms(PARAMS, 3, 0) == 2_000_000
    assert due_in_ms(PARAMS, 3, -1) == 0  # XNACKed back to the group (Redis 8.8)


def test_not_due_counts_entries_and_keeps_the_earliest_time() -> None:
    found = NotDue()
    found.add(3, 500, now_ms=10_000)
    found.add(2, None, now_ms=10_000)
    found.merge(NotDue(1, 10_200))
    assert (found.entries, found.next_due_ms) == (6, 10_200)
    found.merge(NotDue(4, None))
    assert (found.entries, found.next_due_ms) == (10, 10_200)
