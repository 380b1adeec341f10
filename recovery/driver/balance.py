"""Spread the ordering keys evenly over the ordered hand-over's tasks.

Hashing the keys straight into ``spark.partitions`` partitions leaves the largest one well
above the mean (1,000 keys of 20 entries into 8: the largest held about 2,900 entries against
a mean of 2,500), and the hand-over lasts as long as its largest task: at 1 ms per entry,
0.4 s of 3.3. The claim's tasks count their entries per bucket of keys
(``recovery.executor.key_buckets``, a Spark accumulator: no pass of its own), and here the
buckets go, largest first, each to the partition that holds the fewest entries so far
(:func:`spread`); every entry of a key is in one bucket, so in one partition, as before.

Where it cannot (Spark Connect has no accumulators; ``DataFrame.repartitionById`` is
PySpark 4.1's) the keys are hashed into the partitions as before.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from recovery.executor.key_buckets import BucketCounts, BucketCountsParam
from recovery.spark.session import spark_context

if TYPE_CHECKING:
    from pyspark.accumulators import Accumulator

BUCKETS_PER_PARTITION = 32  # fine enough for the largest-first spread to even them out
MAX_BUCKETS = 4096  # the mapping is one SQL array of this many numbers at most


def bucket_count(partitions: int) -> int:
    """How many buckets of keys the claim counts for `partitions` hand-over partitions:
    ``BUCKETS_PER_PARTITION`` each, at most ``MAX_BUCKETS`` (or one each beyond that)."""
    partitions = max(1, partitions)
    return max(partitions, min(BUCKETS_PER_PARTITION * partitions, MAX_BUCKETS))


def counter(spark: SparkSession) -> Accumulator[BucketCounts] | None:
    """A new accumulator of entries per bucket; None under Spark Connect (no SparkContext)."""
    context = spark_context(spark)
    return None if context is None else context.accumulator({}, BucketCountsParam())


def spread(counts: Mapping[int, int], buckets: int, partitions: int) -> list[int]:
    """For each bucket 0 .. `buckets` - 1, the partition (0 .. `partitions` - 1) it goes to:
    the buckets of `counts` (bucket -> entries) largest first, each to the partition with the
    fewest entries so far (ties: the lower bucket, the lower partition); a bucket without
    entries to ``bucket mod partitions``. A bucket outside the range is ignored."""
    assignment = [bucket % partitions for bucket in range(buckets)]
    loads = [(0, partition) for partition in range(partitions)]
    for bucket, entries in sorted(counts.items(), key=lambda item: (-item[1], item[0])):
        if 0 <= bucket < buckets:
            load, partition = heapq.heappop(loads)
            assignment[bucket] = partition
            heapq.heappush(loads, (load + entries, partition))
    return assignment


def spread_by_key(frame: DataFrame, partitions: int, key_columns: Sequence[str],
                  assignment: Sequence[int] | None) -> DataFrame:
    """`frame` (KEYED rows) in `partitions` partitions, every key's entries in one: by
    `assignment` (:func:`spread`'s, over ``len(assignment)`` buckets of ``group_key``) where
    given and PySpark has ``repartitionById``, else hashed by `key_columns`."""
    if assignment is None or not hasattr(frame, "repartitionById"):
        return frame.repartition(partitions, *key_columns)
    # One SQL expression: F.lit of a list costs a py4j call per element (0.2 s for 256).
    partition = F.expr(f"element_at(array({', '.join(str(int(p)) for p in assignment)}), "
                       f"cast(pmod(crc32(group_key), {len(assignment)}) AS INT) + 1)")
    return frame.repartitionById(partitions, partition)
