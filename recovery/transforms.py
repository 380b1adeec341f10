"""Pure DataFrame logic of a run: join, route, summarise. No I/O here."""

from __future__ import annotations

from collections.abc import Callable

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from recovery.schemas import (
    ACTIONS,
    ROUTE_DEAD_LETTER,
    ROUTE_DELETED,
    ROUTE_GONE,
    ROUTE_HANDLE,
)

Transform = Callable[[DataFrame], DataFrame]
ORDER_KEY = "id_order"
JOIN_KEYS = ["stream", "group", ORDER_KEY]


def id_order(entry_id: Column) -> Column:
    """A string that sorts like the stream ID ``<ms>-<seq>`` (both parts zero-padded to 20
    digits, the width of an unsigned 64-bit number), so a sort on it is numeric."""
    ms = F.substring_index(entry_id, "-", 1)
    seq = F.substring_index(entry_id, "-", -1)
    return F.concat(F.lpad(ms, 20, "0"), F.lit("-"), F.lpad(seq, 20, "0"))


def join_pending(pending: DataFrame) -> Transform:
    """Full outer join of claimed entries with the job consumer's PEL on (stream, group, id).

    - claimed and pending: the normal case, the count includes this run's claim;
    - claimed only: deleted upstream, or taken by someone else since the claim;
    - pending only: claimed by an earlier attempt of a retried task or through a lost reply;
      the apply stage fetches their fields.
    A sort-merge join on the numeric order of the IDs: it never broadcasts, it spills to disk
    instead of running out of memory on a stream with millions of pending entries, and it
    hands each (stream, group) over in stream-ID order (the lease reads ID ranges).
    """

    def _join(claimed: DataFrame) -> DataFrame:
        owned = (pending.withColumnRenamed("consumer", "owner")
                 .withColumnRenamed("id", "pending_id")
                 .withColumn(ORDER_KEY, id_order(F.col("pending_id"))))
        joined = claimed.withColumn(ORDER_KEY, id_order(F.col("id"))).join(
            owned, on=JOIN_KEYS, how="full")
        return joined.select(
            "stream",
            "group",
            F.coalesce("consumer", "owner").alias("consumer"),
            F.coalesce("id", "pending_id").alias("id"),
            F.coalesce("deleted", F.lit(False)).alias("deleted"),
            "previous_consumer",
            "idle_ms",
            "fields",
            "delivery_count",
        )

    return _join


def route_column(max_deliveries: int) -> Column:
    """Where an entry goes: deleted upstream, gone from our PEL, dead letter, or handler."""
    return (
        F.when(F.col("deleted"), F.lit(ROUTE_DELETED))
        .when(F.col("delivery_count").isNull(), F.lit(ROUTE_GONE))
        .when(F.col("delivery_count") > max_deliveries, F.lit(ROUTE_DEAD_LETTER))
        .otherwise(F.lit(ROUTE_HANDLE))
    )


def route(max_deliveries: int) -> Transform:
    """Add the `route` column: delivery count above `max_deliveries` -> dead letter."""

    def _route(df: DataFrame) -> DataFrame:
        return df.withColumn("route", route_column(max_deliveries))

    return _route


def summarise(actions: tuple[str, ...] = ACTIONS) -> Transform:
    """Report rows -> one row per (stream, group) with a count per action and a total
    (unordered: a few rows, sorted where they are shown)."""

    def _summarise(report: DataFrame) -> DataFrame:
        counts = report.groupBy("stream", "group").pivot("action", list(actions)).count()
        filled = counts.na.fill(0, list(actions))
        total = sum((F.col(a) for a in actions), F.lit(0))
        return filled.withColumn("total", total.cast("long"))

    return _summarise
