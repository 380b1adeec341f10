"""The IDs a materialised claim's steps counted as found, kept for the read of what the
claim left (recovery.executor.claimed_ids.ClaimedIds). Pure."""

from __future__ import annotations

from recovery.executor.claimed_ids import ClaimedIds


def test_claimed_ids_hold_each_steps_ids_and_the_loose_ones_only():
    """The IDs of claim steps (ranges apart, an ID between two of a step's not its own) and
    loose ones (taken back: anywhere); an ID beside them all is not held."""
    claimed = ClaimedIds()
    claimed.add([b"5-0", b"5-2", b"9-1"])
    claimed.add([b"12-0", b"100-0"])
    claimed.add([])
    claimed.add_loose([b"5-1"])
    held = [b"5-0", b"5-2", b"9-1", b"12-0", b"100-0", b"5-1"]
    apart = [b"1-0", b"5-3", b"9-0", b"10-0", b"13-0", b"99-9", b"100-1", b"2000-0"]
    assert [i for i in held + apart if claimed.holds(i)] == held
    assert not ClaimedIds().holds(b"5-0")

