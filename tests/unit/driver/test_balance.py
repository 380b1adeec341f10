"""The ordered hand-over's keys spread evenly over its partitions (recovery.driver.balance):
the spread itself, and on the tests' Spark session that the claim's buckets are Spark's and
every key lands whole in the partition the spread gave its bucket."""

from __future__ import annotations

import random
from collections import Counter

import pytest
from pyspark.sql import functions as F

from recovery.driver.balance import bucket_count, counter, spread, spread_by_key
from recovery.executor.key_buckets import bucket_of, count_buckets

KEYS = ("stream", "group", "keyless", "group_key")


def test_the_largest_buckets_go_first_each_to_the_least_loaded_partition():
    assert spread({0: 5, 1: 4, 2: 3, 3: 3, 4: 1}, 6, 2) == [0, 1, 1, 0, 1, 1]
    # partition 0: 5 + 3 = 8; partition 1: 4 + 3 + 1 = 8; bucket 5, empty: 5 mod 2


def test_buckets_are_many_per_partition_up_to_a_bound():
    assert [bucket_count(n) for n in (0, 1, 8, 128, 200, 5000)] == [32, 32, 256, 4096, 4096,
                                                                   5000]


def test_buckets_without_entries_or_out_of_range_change_nothing():
    assert spread({}, 4, 3) == [0, 1, 2, 0]
    assert spread({7: 100, -1: 5, 1: 2}, 4, 2) == [0, 0, 0, 1]


def test_keys_of_very_different_sizes_are_spread_within_one_bucket_of_even():
    """A hot key of 3,000 entries beside 999 keys of 1 to 40, over 8 partitions."""
    rng = random.Random(3)
    sizes = {b"hot": 3000, **{f"k{k}".encode(): rng.randrange(1, 41) for k in range(999)}}
    buckets = bucket_count(8)
    counts = count_buckets([k for k, n in sizes.items() for _ in range(n)], buckets)
    assignment = spread(counts, buckets, 8)
    loads = Counter()
    for bucket, entries in counts.items():
        loads[assignment[bucket]] += entries
    mean = sum(sizes.values()) / 8
    assert max(loads.values()) <= max(mean, max(counts.values())) + max(
        n for b, n in counts.items() if n < max(counts.values()))


@pytest.mark.slow
def test_the_claims_buckets_are_sparks_and_each_key_lands_whole_where_its_bucket_went(spark):
    rng = random.Random(7)
    keys = [bytes(rng.randrange(256) for _ in range(rng.randrange(1, 12))) for _ in range(300)]
    rows = [("s", "g", False, key, i) for key in keys for i in range(rng.randrange(1, 9))]
    frame = spark.createDataFrame(rows, "stream string, group string, keyless boolean, "
                                        "group_key binary, n int").repartition(3)
    buckets = bucket_count(4)
    sparks = frame.select("group_key", F.pmod(F.crc32("group_key"), F.lit(buckets))
                          .alias("bucket")).collect()
    assert {(bytes(r["group_key"]), r["bucket"]) for r in sparks} == \
        {(key, bucket_of(key, buckets)) for key in keys}
    counts = count_buckets([row[3] for row in rows], buckets)
    assignment = spread(counts, buckets, 4)
    placed = spread_by_key(frame, 4, KEYS, assignment).rdd.mapPartitionsWithIndex(
        lambda index, part: [(index, bytes(row["group_key"])) for row in part]).collect()
    assert len(placed) == len(rows)
    where = {key: {index for index, k in placed if k == key} for key in keys}
    assert all(found == {assignment[bucket_of(key, buckets)]} for key, found in where.items())
    loads = Counter(index for index, _ in placed)
    assert max(loads.values()) - min(loads.values()) <= max(counts.values())
    hashed = frame.repartition(4, *KEYS).rdd.glom().map(len).collect()
    assert max(loads.values()) <= max(hashed)  # never worse than hashing the keys


@pytest.mark.slow
def test_the_claims_tasks_add_their_counts_to_the_accumulator(spark):
    counts = counter(spark)
    assert counts is not None

    def add(batches):
        for batch in batches:
            counts.add(count_buckets(batch.column("k").to_pylist(), 16))
            yield batch

    keys = [b"a", b"b", b"a", b"c", b"a"]
    spark.createDataFrame([(k,) for k in keys], "k binary").repartition(2) \
        .mapInArrow(add, "k binary").collect()
    assert counts.value == count_buckets(keys, 16)
