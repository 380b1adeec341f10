"""A letter moved back to its source (recovery.console.moves.redrive_letter) by the move
script, which reads the letter itself: of two operators who both read it, one copy only.
Against a real Redis."""

from __future__ import annotations

from recovery.console.letters import Letter
from recovery.console.moves import Moved, redrive_letter
from recovery.redis_io.letters import letters_by_id
from recovery.testing.local_redis import LocalServer
from tests.support.console_tools import DLQ, entries, seed, state_for


def test_both_read_the_letter_then_both_move_it_one_copy(redis_server: LocalServer) -> None:
    """The race at its narrowest: two operators' tasks both read the letter, then both run
    the move; the script's own range read makes the second a no-op."""
    r = redis_server.client()
    ids = seed(r, "orders", [{b"n": b"0"}, {b"n": b"1"}])
    source_before = r.xlen("orders")
    state = state_for(redis_server)
    try:
        flat = letters_by_id(state.conn.client, DLQ["orders"], [ids[0]])[ids[0]]
        first = redrive_letter(state.conn.client, DLQ["orders"], Letter.of(ids[0], flat),
                               ["orders"])
        second = redrive_letter(state.conn.client, DLQ["orders"], Letter.of(ids[0], flat),
                                ["orders"])
    finally:
        state.close()
    assert (first[0], second) == (Moved.MOVED, (Moved.GONE, ""))
    assert r.xlen("orders") == source_before + 1
    assert [i for i, _ in entries(r, DLQ["orders"])] == [ids[1]]
