"""XAUTOCLAIM's replies read (recovery.redis_io.autoclaim): on Redis 6.2 an entry deleted
upstream comes back as nil, and its ID is found only by its position among the PEL rows read
just before, when those positions can be verified; otherwise no ID is guessed. Pure: the
replies as Redis 6.2.5 gives them (the whole claim on a real 6.2:
tests/unit/executor/claim/test_loop.py)."""

from __future__ import annotations

import pytest

from recovery.redis_io.autoclaim import deleted_by_position
from tests.support.backlogs import HOUR_MS


def _row(entry_id: str) -> list:
    return [entry_id.encode(), b"crashed", HOUR_MS, 1]


def _item(entry_id: str | None) -> list | None:
    return None if entry_id is None else [entry_id.encode(), [b"f", b"v"]]


@pytest.mark.parametrize(("claimed", "rows", "cursor", "expected"), [
    # As Redis 6.2.5 replied: 4-0 claimed, 5-0 deleted (nil), 6-0 claimed, next cursor 7-0.
    (["4-0", None, "6-0"], ["4-0", "5-0", "6-0"], "7-0", [b"5-0"]),
    ([None, None], ["1-0", "2-0"], "0-0", [b"1-0", b"2-0"]),
    # 3-0 turned idle between the read and the claim, and was claimed: positions shifted.
    (["1-0", None, "2-0"], ["1-0", "2-0", "4-0"], "5-0", None),
    (["1-0", None, None], ["1-0", "2-0", "4-0"], "4-0", None),  # shifted past the cursor
    (["1-0", None], ["1-0"], "0-0", None),  # more claimed than read
])
def test_nil_entries_of_redis_6_2_are_matched_by_position_or_not_at_all(
        claimed, rows, cursor, expected):
    """A wrong match would report a live entry as deleted (and ack it unhandled): when the
    positions cannot be verified, no ID is guessed (the claim then reads its own range)."""
    items = [_item(c) for c in claimed]
    assert deleted_by_position(items, [_row(r) for r in rows], cursor) == expected
