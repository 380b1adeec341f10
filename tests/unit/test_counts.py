"""Counts read from outside the run (recovery.counts): a value is a count only when it is
ASCII digits within the bound; a PEL count past the int64 maximum, or wrapped negative by the
server, reads as the maximum (the report's int64 column); odd values of a field are tested
against the whole job in tests/integration/test_odd_fields.py."""

from __future__ import annotations

from recovery.counts import INT64_MAX, MAX_CARRIED, count_of, saturate_all, saturated
from recovery.executor.claimed import with_carried

CARRIED = b"x-recovery-deliveries"


def test_counts_saturate_at_the_int64_maximum():
    assert count_of(None) is None
    assert count_of(str(INT64_MAX).encode()) == INT64_MAX
    assert count_of(str(INT64_MAX + 1).encode()) is None
    assert count_of(b"0" * 5000 + b"12") == 12  # leading zeros are no digits too many
    assert [saturated(n) for n in (0, 5, INT64_MAX, INT64_MAX + 1, -1, -(2**63))] == \
        [0, 5, INT64_MAX, INT64_MAX, INT64_MAX, INT64_MAX]  # negative: the counter wrapped
    assert with_carried(INT64_MAX, [(CARRIED, str(MAX_CARRIED).encode())]) == INT64_MAX
    assert with_carried(-(2**63), None) == INT64_MAX
    assert with_carried(3, [(CARRIED, b"9" * 20)]) == 3, "an odd carried count is ignored"
    assert with_carried(None, [(CARRIED, b"4")]) is None


def test_saturate_all_fixes_only_counts_out_of_range_in_place_and_keeps_none():
    """Catches a list with a None skipped whole, a None turned into a count, or a copy
    saturated in place of the caller's list."""
    counts: list[int | None] = [3, None, -1, INT64_MAX + 5, INT64_MAX]
    saturate_all(counts)
    assert counts == [3, None, INT64_MAX, INT64_MAX, INT64_MAX]
    sane: list[int | None] = [0, 1, INT64_MAX]
    saturate_all(sane)
    assert sane == [0, 1, INT64_MAX]
    nothing: list[int | None] = [None, None]
    saturate_all(nothing)
    assert nothing == [None, None]
