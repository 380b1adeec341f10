"""Where the hand-over sends each claimed entry (recovery.executor.handover.routed.route):
the delivery limit is exclusive, a deleted entry is reported deleted whatever its count, and
an entry whose count is unknown is gone from the PEL. Pure."""

from __future__ import annotations

from recovery.executor.handover.routed import route


def test_route_limit_is_exclusive_deleted_first_unknown_count_gone():
    cases = [(False, 4), (False, 5), (False, 6), (True, 9), (False, None), (True, None)]
    assert [route(deleted, count, max_deliveries=5) for deleted, count in cases] == [
        "handle", "handle", "dead_letter", "deleted", "gone", "deleted"]
