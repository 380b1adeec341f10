"""The handler contract (recovery.handlers): whatever a handler returns becomes one Result
per message, and a reply that is not one is a failure, never a success."""

from __future__ import annotations

from recovery.handlers import Result, normalise_reply


def test_handler_replies_are_normalised():
    assert normalise_reply([True, Result.failure("x")], 2) == [Result(True), Result(False, "x")]
    garbage = normalise_reply([True], 2)
    assert [r.ok for r in garbage] == [False, False]
    assert "garbage" in (garbage[0].error or "")
    assert [r.ok for r in normalise_reply([1, 2], 2)] == [False, False]
