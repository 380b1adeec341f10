"""Which keys a job works on (recovery.targets.keys): a stream holds dead letters only when
its oldest entry carries the whole metadata block the move script writes (an empty stream
too); half a block, the block's names as values, or a key of another type does not. Pure."""

from __future__ import annotations

import pytest
from redis.exceptions import ResponseError

from recovery.targets.keys import holds_letters


@pytest.mark.parametrize(("reply", "letters"), [
    ([], True),  # an empty stream
    ([[b"1-1", [b"x-original-stream", b"s", b"x-original-id", b"1-0",
                b"x-death-reason", b"max-deliveries-exceeded"]]], True),
    ([[b"1-1", [b"order", b"o-1", b"x-original-stream", b"s"]]], False),  # half a block
    ([[b"1-1", [b"x-original-id", b"x-original-stream", b"x-death-reason", b"v"]]], False),
    (ResponseError("WRONGTYPE"), False),
])
def test_a_stream_holds_letters_when_its_oldest_entry_carries_the_block(reply, letters):
    assert holds_letters(reply) is letters
