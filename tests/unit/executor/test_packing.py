"""Claimed batches packed for Spark (recovery.executor.packing): pure Arrow, plus one round
trip through a real Spark checkpoint."""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
import pytest
from chispa import assert_df_equality
from pyspark import StorageLevel

from recovery.executor.claimed import CLAIMED_ARROW, Claimed
from recovery.executor.packing import PACK_ROWS, packed, packed_row, unpacked
from recovery.executor.partitions import coalesced
from recovery.schemas import CLAIMED, PACKED

# Names and values that must survive byte for byte: not UTF-8, empty, a NUL, duplicates.
ODD_FIELDS = [{"name": b"\xff\xfe", "value": b""}, {"name": b"k", "value": b"a\x00b"},
              {"name": b"k", "value": b"dup"}]


def claimed(n: int, start: int = 0) -> pa.RecordBatch:
    """`n` CLAIMED rows with IDs start-0 .. ; every third deleted (no fields)."""
    rows = [{"stream": "s{eu}", "group": "g", "consumer": "c-0", "id": f"{i}-0",
             "deleted": i % 3 == 2, "previous_consumer": None if i % 3 == 2 else "dead",
             "idle_ms": 1000 + i, "fields": None if i % 3 == 2 else ODD_FIELDS[: i % 4],
             "delivery_count": i % 7} for i in range(start, start + n)]
    return pa.RecordBatch.from_pylist(rows, schema=CLAIMED_ARROW)


@pytest.mark.parametrize("start, length", [(0, 12), (5, 4), (11, 1), (3, 0)])
def test_claimed_columns_round_trip_arrow_byte_for_byte(start: int, length: int):
    batch = claimed(12).slice(start, length)  # a slice: offsets into a bigger child array
    columns = Claimed.from_arrow(batch)
    assert columns.fields[:3] == [
        [(f["name"], f["value"]) for f in row["fields"]] if row["fields"] is not None else None
        for row in batch.to_pylist()[:3]]
    assert columns.to_arrow().to_pylist() == batch.to_pylist()


@pytest.mark.parametrize("rows, sizes", [(2, [2, 3, 2]), (1000, [7]), (1, [1, 1, 3, 1, 1])])
def test_coalesced_joins_small_batches_in_order_and_drops_empty_ones(rows: int, sizes: list[int]):
    parts = [claimed(1), claimed(0, 1), claimed(1, 1), claimed(3, 2), claimed(1, 5),
             claimed(1, 6)]
    out = list(coalesced(lambda _: iter(parts), rows)(iter([])))
    assert [b.num_rows for b in out] == sizes
    assert pa.Table.from_batches(out).to_pylist() == pa.Table.from_batches(parts).to_pylist()
    assert list(coalesced(lambda _: iter([claimed(0)]), rows)(iter([]))) == []


@pytest.mark.parametrize("rows", [1, 4, 7, 10, 1000])
def test_unpacked_recuts_in_order_into_batches_of_exactly_rows(rows: int):
    batches = [claimed(3), claimed(0, 3), claimed(10, 3).slice(2, 5), claimed(2, 13)]
    packed_batches = [pa.Table.from_batches([packed_row(b) for b in batches[:2]]
                                            ).combine_chunks().to_batches()[0],
                      packed_row(batches[2]), packed_row(batches[3])]
    out = list(unpacked(iter(packed_batches), rows))
    total = sum(b.num_rows for b in batches)
    sizes = [rows] * (total // rows) + ([total % rows] if total % rows else [])
    assert [b.num_rows for b in out] == sizes
    assert pa.Table.from_batches(out).to_pylist() == pa.Table.from_batches(batches).to_pylist()


def test_unpacked_refuses_empty_steps():
    with pytest.raises(ValueError, match="rows must be at least 1"):
        list(unpacked(iter([packed_row(claimed(1))]), 0))


@pytest.mark.slow
def test_claimed_batches_survive_spark_checkpoint_packed(spark):
    """Python -> JVM -> disk checkpoint -> JVM -> Python: every row, byte for byte, in order
    within each partition."""
    big = claimed(2 * PACK_ROWS + 3, 20)  # three packs
    parts = [[claimed(5, 0), claimed(0, 5), claimed(4, 5)], [big, claimed(6, 1000)]]

    def claim(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            yield from parts[batch.column("id").to_pylist()[0]]

    ids = spark.range(0, 2, 1, 2)
    checkpoint = ids.mapInArrow(packed(claim), PACKED).localCheckpoint(
        eager=True, storageLevel=StorageLevel.DISK_ONLY)
    back = checkpoint.mapInArrow(lambda batches: unpacked(batches, 4), CLAIMED)
    expected = spark.createDataFrame(
        pa.Table.from_batches([b for part in parts for b in part]).to_pylist(), CLAIMED)
    assert checkpoint.count() == 6  # a pack per batch, big batches in packs of PACK_ROWS
    assert_df_equality(back, expected, ignore_row_order=True)
    in_order = back.collect()
    assert [r["id"] for r in in_order[:9]] == [f"{i}-0" for i in range(9)]
