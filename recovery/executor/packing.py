"""Claimed entries cross Spark packed: PACKED rows, each holding up to PACK_ROWS rows of an
Arrow batch as Arrow IPC bytes. Pure Arrow, no I/O.

Spark's cost of moving data between Python and the JVM, and through the claim's checkpoint,
is per row and per value. Packed, a million entries are about 8,000 rows of bytes that the
JVM only copies (what that saves: docs/PERFORMANCE.md). The claim's output stays
materialised exactly once; only its encoding changes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

import pyarrow as pa

from recovery.schemas import PACKED, arrow

ArrowFn = Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]
PACKED_ARROW = arrow(PACKED)
# Rows per pack. Whole claim steps (1,000 entries, ~250 KB) made the local JVM's heap grow to
# its limit at 1M entries (peak RSS 1.09 GB against 0.62 GB at 100k); packs of 128 keep it
# flat (0.62 GB at 1M) at the same speed, and are still ~8,000 rows per million entries.
PACK_ROWS = 128


def pack(batch: pa.RecordBatch) -> pa.Buffer:
    """`batch` as one Arrow IPC stream (schema included): self-describing bytes."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    return sink.getvalue()


def unpack(blob: pa.Buffer | bytes) -> pa.RecordBatch:
    """The one batch of an IPC stream made by :func:`pack` (zero-copy on a Buffer)."""
    return pa.ipc.open_stream(blob).read_next_batch()


def packed_row(batch: pa.RecordBatch) -> pa.RecordBatch:
    """A one-row PACKED batch holding `batch` (the bytes are not copied again)."""
    blob = pack(batch)
    offsets = pa.array([0, blob.size], pa.int32()).buffers()[1]
    column = pa.Array.from_buffers(pa.binary(), 1, [None, offsets, blob])
    return pa.RecordBatch.from_arrays([pa.array([batch.num_rows], pa.int64()), column],
                                      schema=PACKED_ARROW)


def packed_rows(batch: pa.RecordBatch) -> Iterator[pa.RecordBatch]:
    """`batch` as PACKED rows of at most PACK_ROWS of its rows each (none when empty)."""
    for start in range(0, batch.num_rows, PACK_ROWS):
        yield packed_row(batch.slice(start, PACK_ROWS))


def packed(fn: ArrowFn) -> ArrowFn:
    """`fn` with each output batch packed into PACKED rows of at most PACK_ROWS rows each."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in fn(batches):
            yield from packed_rows(batch)

    return run


# A PACKED row whose `rows` is NOTE_ROWS holds no entries but a note for the stage that reads
# the packs (bytes it interprets itself: a unit's PEL histogram as JSON).
NOTE_ROWS = -1


def note_row(note: bytes) -> pa.RecordBatch:
    """A one-row PACKED batch holding `note` instead of entries."""
    return pa.RecordBatch.from_arrays([pa.array([NOTE_ROWS], pa.int64()),
                                       pa.array([note], pa.binary())], schema=PACKED_ARROW)


def unpacked(batches: Iterable[pa.RecordBatch], rows: int,
             on_note: Callable[[bytes], None] | None = None) -> Iterator[pa.RecordBatch]:
    """The batches held by PACKED `batches`, in order, cut again into batches of exactly
    `rows` rows (the last one shorter), as Spark would have cut unpacked rows. Notes
    (``note_row``) go to `on_note` as they come (dropped without one)."""
    if rows < 1:
        raise ValueError(f"rows must be at least 1, got {rows}")
    held: list[pa.RecordBatch] = []
    held_rows = 0
    for packed_batch in batches:
        counts = packed_batch.column("rows").to_pylist()
        for count, blob in zip(counts, packed_batch.column("batch"), strict=True):
            if count == NOTE_ROWS:
                if on_note is not None:
                    on_note(blob.as_py())
                continue
            batch = unpack(blob.as_buffer())
            held.append(batch)
            held_rows += batch.num_rows
            while held_rows >= rows:
                joined = held[0] if len(held) == 1 else pa.concat_batches(held)
                yield joined.slice(0, rows)
                rest = joined.slice(rows)
                held, held_rows = ([rest] if rest.num_rows else []), rest.num_rows
    if held_rows:
        yield pa.concat_batches(held)
