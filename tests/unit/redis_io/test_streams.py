"""Stream replies read as the job needs them (recovery.redis_io.streams): IDs ordered as
numbers and the next ID after one (the start of a page that must not read an entry twice,
nor skip one at the sequence's maximum), XINFO rows with text keys and names kept as bytes
where they are not UTF-8, and names shown escaped. Pure (the same functions against real
servers: test_round_trips.py and the claim's tests)."""

from __future__ import annotations

from recovery.redis_io.streams import info_rows, next_id, pairs, shown, stream_id_key

MAX_SEQ = 2**64 - 1


def test_ids_order_as_numbers_and_the_next_id_carries_into_the_millisecond() -> None:
    """Catches a lexical sort (``"10-0" < "9-0"``) and a next ID past the sequence's
    maximum that Redis refuses or that skips the following millisecond's first entry."""
    ids = ["10-0", "9-5", "9-10", "100", f"9-{MAX_SEQ}"]
    assert sorted(ids, key=stream_id_key) == ["9-5", "9-10", f"9-{MAX_SEQ}", "10-0", "100"]
    assert next_id("9-5") == "9-6" and next_id("100") == "100-1"
    assert next_id(f"9-{MAX_SEQ}") == "10-0"


def test_xinfo_rows_keep_odd_names_as_bytes_and_pairs_keep_order() -> None:
    """Catches a name that is not UTF-8 decoded lossily (it could then not be sent back to
    Redis) and field pairs reordered or deduplicated."""
    reply = [[b"name", b"g", b"consumers", 2], [b"name", b"\xff-g", "pending", 0]]
    assert info_rows(reply) == [{"name": "g", "consumers": 2},
                                {"name": b"\xff-g", "pending": 0}]
    assert shown(b"\xff-g") == "\\xff-g" and shown("g") == "g"
    assert pairs([b"k", b"1", b"k", b"2", b"\xff", b""]) == [
        (b"k", b"1"), (b"k", b"2"), (b"\xff", b"")]
