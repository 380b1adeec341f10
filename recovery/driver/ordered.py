"""Per-key ordered recovery on the driver (``order.key_field``; README, "Per-key order").

1. claim on executors, as always, materialised once (``recovery.spark.tasks``);
2. each entry given its ordering key (``recovery.executor.ordered.keyed_partition``);
3. per (stream, group), the keys held back by older entries pending on consumers that are
   not this run's (not idle yet, a live consumer's, a killed run's): a small read-only pass
   (``blocker_partition``), broadcast to the join;
4. the entries shuffled by (stream, group, key) over ``spark.partitions`` tasks and sorted by
   ID within each, so every key's entries meet in one task in ID order whichever task or
   split part claimed them; then handed over key by key
   (``recovery.executor.handover.ordered``) and reported by Spark's writer (a retried
   hand-over's report is dropped with it).
"""

from __future__ import annotations

import logging
import time

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from recovery.driver.discovery import WorkUnit, job_consumer_stem
from recovery.errors import ConfigError
from recovery.executor.ordered import blocker_partition, keyed_partition, ordered_partition
from recovery.executor.partitions import claim_partition
from recovery.executor.tally import Tallies
from recovery.params import JobParams
from recovery.report.run_report import RunSummary, read_run, write_pass
from recovery.schemas import BLOCKER, KEYED, PACKED, Action
from recovery.settings.model import Settings
from recovery.spark.tasks import materialise_once

log = logging.getLogger(__name__)
ORDER_COLUMNS = ("stream", "group", "keyless", "group_key")


def check_order(settings: Settings, dry_run: bool, plan: str | None) -> None:
    """Refuse what per-key order cannot honour (exit 2): applying a plan (its claims by ID
    would skip the blocker reads the order needs)."""
    if settings.order.ordered and plan is not None and not dry_run:
        raise ConfigError("--plan cannot be applied with order.key_field set: run without "
                          "--plan, or unset order.key_field / order.key_fields")


def ordered_actions(actions: tuple[str, ...], params: JobParams, dry_run: bool
                    ) -> tuple[str, ...]:
    """The summary's action columns: with per-key order, ``held`` too (a real run)."""
    return (*actions, Action.HELD) if params.order is not None and not dry_run else actions


def claim_then_order(spark: SparkSession, settings: Settings, params: JobParams,
                     unit_df: DataFrame, units: list[WorkUnit], histograms: bool,
                     rows: int) -> Tallies:
    """Claim (materialised once), key, shuffle by key, sort by ID, hand over in key order and
    report in steps of `rows` entries; the tallies."""
    started = time.monotonic()
    claimed = materialise_once(unit_df.mapInArrow(claim_partition(params, histograms), PACKED))
    log.info("run %s: claim done in %.1f s; handing over in per-key order", params.run_id,
             time.monotonic() - started)
    started = time.monotonic()
    frame = ordered_frame(spark, params, claimed, units, settings.spark.partitions,
                          job_consumer_stem(settings.claim.consumer_prefix, params.run_id))
    tallies = write_pass(frame, ordered_partition(params, rows), settings.report.path,
                         params.run_id, by_workers=False)
    log.info("run %s: dead-letter, handler in per-key order, acks and report done in %.1f s",
             params.run_id, time.monotonic() - started)
    return tallies


def ordered_frame(spark: SparkSession, params: JobParams, claimed: DataFrame,
                  units: list[WorkUnit], partitions: int, own_stem: str) -> DataFrame:
    """The claimed entries with their keys and blockers, in `partitions` partitions by
    (stream, group, key), sorted by ID within each key."""
    keyed = claimed.mapInArrow(keyed_partition(params), KEYED)
    pairs = sorted({(u.stream, u.group) for u in units})
    unit_rows = spark.createDataFrame(pairs, "stream string, group string") \
        .repartition(max(1, min(partitions, len(pairs))))
    blockers = unit_rows.mapInArrow(blocker_partition(params, own_stem), BLOCKER)
    by_key = blockers.where(F.col("order_key").isNotNull())
    by_unit = blockers.where(F.col("order_key").isNull()).select(
        "stream", "group", F.col("blocked_by").alias("unit_blocked_after"))
    joined = keyed.join(F.broadcast(by_key), ["stream", "group", "order_key"], "left") \
        .join(F.broadcast(by_unit), ["stream", "group"], "left")
    return joined.repartition(partitions, *ORDER_COLUMNS) \
        .sortWithinPartitions(*ORDER_COLUMNS, "id_order")


def add_held_keys(spark: SparkSession, settings: Settings, summary: RunSummary) -> None:
    """The summary's ``held_keys``: how many keys the run held (distinct stream, group and
    the ID their held entries wait behind, from the report), when it held any."""
    if not summary.totals.get(Action.HELD):
        summary.held_keys = 0
        return
    held = read_run(spark, settings.report.path, summary.run_id) \
        .where(F.col("action") == Action.HELD.value)
    behind = F.col("reason").startswith("held behind ")
    heads = held.where(behind).select(
        "stream", "group", F.regexp_extract("reason", r"^held behind (\S+)", 1)).distinct()
    summary.held_keys = heads.count() + held.where(~behind).count()
