"""How many claimed entries fall in each bucket of ordering keys, counted by the claim's tasks
so that the driver can spread the keys evenly over the hand-over's tasks
(``recovery.driver.balance``) without a Spark pass of its own.

A key's bucket is ``crc32(group_key) mod buckets``, the CRC-32 of the KEYED row's
``group_key`` (the key's value, or the entry's own ID for an entry without one): the same
function as Spark SQL's ``crc32`` (``java.util.zip.CRC32``) on that column, so every entry of
a key, and every task that claimed one, finds the same bucket.
"""

from __future__ import annotations

import zlib
from collections import Counter
from collections.abc import Iterable

from pyspark.accumulators import AccumulatorParam

BucketCounts = dict[int, int]  # bucket -> entries claimed in it


def bucket_of(group_key: bytes, buckets: int) -> int:
    """The bucket (0 .. `buckets` - 1) of a key given as its ``group_key`` bytes."""
    return zlib.crc32(group_key) % buckets


def count_buckets(group_keys: Iterable[bytes], buckets: int) -> BucketCounts:
    """Entries per bucket of `group_keys` (one per entry)."""
    return dict(Counter(bucket_of(key, buckets) for key in group_keys))


class BucketCountsParam(AccumulatorParam[BucketCounts]):
    """A Spark accumulator of :data:`BucketCounts`: the tasks' counts summed per bucket (Spark
    merges a task attempt's only when it succeeds)."""

    def zero(self, value: BucketCounts) -> BucketCounts:
        return {}

    def addInPlace(self, value1: BucketCounts, value2: BucketCounts) -> BucketCounts:
        for bucket, entries in value2.items():
            value1[bucket] = value1.get(bucket, 0) + entries
        return value1
