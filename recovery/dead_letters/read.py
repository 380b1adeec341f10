"""Executor side of a dead-letter read: one Spark partition reads its dead-letter streams in
pages of XRANGE and yields DEAD_LETTER rows (``recovery.schemas``), one per dead letter.

What a dead letter holds (``recovery/redis_io/lua/dead_letter.lua``): the original fields
verbatim, then a metadata block that starts with ``x-original-stream``; a redrive
(``lua/redrive.lua``) strips the block and adds ``x-redrive-count`` to the original fields,
so a letter dead-lettered again carries it among them. An entry written by something else
(no block) is still read: its metadata columns are null and every field is an original one.

Never imports the driver side (settings, pydantic): Spark's Python workers run it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence

import pyarrow as pa

from recovery.counts import INT64_MAX, count_of
from recovery.errors import StreamUnitError
from recovery.executor.packing import ArrowFn
from recovery.params import DeadLetterReadParams
from recovery.redis_io.redis_conn import RedisConn
from recovery.redis_io.streams import range_pages
from recovery.schemas import DEAD_LETTER, arrow

log = logging.getLogger(__name__)
DEAD_LETTER_ARROW = arrow(DEAD_LETTER)
BLOCK_START = b"x-original-stream"  # the first field of the metadata block
REDRIVE_COUNT = b"x-redrive-count"
# x- field -> DEAD_LETTER column; numbers are parsed, text decoded.
META_COLUMNS = {
    BLOCK_START: "source_stream",
    b"x-original-group": "group",
    b"x-original-id": "original_id",
    b"x-original-consumer": "original_consumer",
    b"x-delivery-count": "delivery_count",
    b"x-delivery-limit": "delivery_limit",
    b"x-death-reason": "death_reason",
    b"x-death-time": "death_time_ms",
    b"x-run-id": "death_run_id",
    b"x-exception-message": "exception_message",
    b"x-idle-ms": "idle_ms",
}
# Number columns -> the largest value each takes; a field that is no count up to it is null.
# x-death-time: the last epoch ms of year 9999, the last a timestamp (``death_time``) and
# Python's datetime both hold.
MAX_EPOCH_MS = 253_402_300_799_999
NUMBERS = {"delivery_count": INT64_MAX, "delivery_limit": INT64_MAX,
           "death_time_ms": MAX_EPOCH_MS, "idle_ms": INT64_MAX}
COLUMNS = [f.name for f in DEAD_LETTER.fields]


def text(value: bytes) -> str:
    """Bytes as text: UTF-8, anything else as ``\\xNN`` escapes."""
    return value.decode("utf-8", "backslashreplace")


def number(value: bytes | None, bound: int = INT64_MAX) -> int | None:
    """A count or time field (ASCII digits, at most `bound`; the int64 maximum: the column's
    type), or None when absent or no such number (``recovery.counts.count_of``: never
    raises)."""
    return count_of(value, bound)


def split_fields(flat: Sequence[bytes]) -> tuple[list[tuple[bytes, bytes]], dict[bytes, bytes]]:
    """A dead letter's flat fields -> (original fields in order, metadata block as a dict with
    the first value of each name). The block starts at the last ``x-original-stream`` name;
    without one, every field is original and the block is empty."""
    start = len(flat)
    for i in range(len(flat) - 2, -1, -2):
        if flat[i] == BLOCK_START:
            start = i
            break
    originals = [(flat[i], flat[i + 1]) for i in range(0, start, 2)]
    block: dict[bytes, bytes] = {}
    for i in range(start, len(flat) - 1, 2):
        block.setdefault(flat[i], flat[i + 1])
    return originals, block


def dead_letter_row(key: str, entry_id: bytes, flat: Sequence[bytes]) -> dict[str, object]:
    """One DEAD_LETTER row (without `death_time`) from one XRANGE entry of dead-letter stream
    `key`."""
    originals, block = split_fields(flat)
    row: dict[str, object] = {"dead_letter_key": key, "dead_letter_id": text(entry_id)}
    for name, column in META_COLUMNS.items():
        value = block.get(name)
        if column in NUMBERS:
            row[column] = number(value, NUMBERS[column])
        else:
            row[column] = None if value is None else text(value)
    fields: dict[str, bytes] = {}
    redrives: bytes | None = None
    for name, value in originals:
        if name == REDRIVE_COUNT:
            redrives = value if redrives is None else redrives
        else:
            fields.setdefault(text(name), value)
    row["redrive_count"] = number(redrives)
    row["fields"] = list(fields.items())
    return row


def page_batch(key: str, entries: Sequence[Sequence[object]]) -> pa.RecordBatch:
    """One XRANGE page of `key` (raw reply) as a DEAD_LETTER Arrow batch."""
    rows = [dead_letter_row(key, e[0], e[1]) for e in entries]  # type: ignore[arg-type]
    return pa.RecordBatch.from_pydict({c: [r[c] for r in rows] for c in COLUMNS},
                                      schema=DEAD_LETTER_ARROW)


def read_stream(conn: RedisConn, key: str, page: int) -> Iterator[pa.RecordBatch]:
    """Every dead letter of `key`, one batch per XRANGE page of `page` entries. A key that
    became another type since the driver looked is left (logged); the driver's count shows
    the difference."""
    try:
        with conn.errors(key):
            for entries in range_pages(conn.client, key, page):
                yield page_batch(key, entries)
    except StreamUnitError as exc:
        log.warning("dead letters of %s not read: %s", key, exc)


def read_partition(params: DeadLetterReadParams) -> ArrowFn:
    """The mapInArrow function: DEAD_LETTER_KEY rows -> DEAD_LETTER rows of those keys, one
    Redis client per partition (none for an empty one). On a Redis Cluster the driver put
    only keys of one primary in a partition, so its client talks to that node."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        keys = [k for batch in batches for k in batch.column("dead_letter_key").to_pylist()]
        if not keys:
            return
        with RedisConn.open(params.redis) as conn:
            for key in keys:
                yield from read_stream(conn, key, params.page)

    return run
