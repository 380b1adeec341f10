"""Units of work found on the driver (recovery.driver.discovery): how they are assigned to
Spark partitions and named consumers."""

from __future__ import annotations

from recovery.driver.discovery import WorkUnit, assign


def test_assign_balances_biggest_first_and_names_consumers_by_part():
    units = [WorkUnit("a", "g", 100), WorkUnit("b", "g", 60), WorkUnit("c", "g", 50)]
    parts = assign(units, 2, "rec", "run1")
    assert [(u.stream, p, u.consumer) for u, p in parts] == [
        ("a", 0, "rec-run1-0"), ("b", 1, "rec-run1-1"), ("c", 1, "rec-run1-1")]
