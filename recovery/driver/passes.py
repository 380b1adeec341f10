"""The recovery's Spark passes on the driver's side: claim and hand-over in one pass (each
claim step journaled in Redis where Spark may run a task twice), or, where the journal cannot
be kept, the claim materialised once before a second stage hands it over
(``recovery.driver.job`` chooses and calls :func:`recover`)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from pyspark.sql import DataFrame, SparkSession

from recovery.executor.handover.lease import LEASE_ROWS
from recovery.executor.packing import PACK_ROWS
from recovery.executor.partitions import apply_partition, claim_partition, recover_partition
from recovery.executor.tally import Tallies
from recovery.params import JobParams
from recovery.redis_io.journal import drop_journals, journal_key, open_journals
from recovery.redis_io.redis_conn import RedisConn
from recovery.report.run_report import write_pass
from recovery.schemas import PACKED
from recovery.settings.model import Settings
from recovery.spark.tasks import materialise_once, session_conf

log = logging.getLogger(__name__)
MAX_RECORDS_PER_BATCH = "spark.sql.execution.arrow.maxRecordsPerBatch"
DEFAULT_RECORDS_PER_BATCH = 10_000  # Spark's default for the key above


def recover(spark: SparkSession, conn: RedisConn, settings: Settings, params: JobParams,
            unit_df: DataFrame, consumers: list[tuple[str, str, str]], one_pass: bool,
            histograms: bool, after_claim: Callable[[], None] | None = None) -> Tallies:
    """Claim, dead-letter, handle, ack and report: in one pass when Spark never retries a
    task, or when it may and the claim journal can be kept in Redis (a retried attempt
    reports from it); else with the claim materialised first (a retried hand-over reports
    from it). Returns the tallies. `after_claim`, if given, is called on the materialised
    path once the claim is done, before anything is handed over."""
    master = str(spark.conf.get("spark.master", "") or "")
    if one_pass:
        log.info("run %s: tasks are not retried (master %s): claim and hand-over in one pass",
                 params.run_id, master)
        return _one_pass(settings, params, unit_df, None, histograms)
    prefix = settings.claim.journal_prefix
    keys = [journal_key(prefix, c) for c in sorted({c for _, _, c in consumers})] \
        if prefix else []
    refusal: str | None = "claim.journal_prefix is empty"
    if prefix:
        with conn.errors():
            refusal = open_journals(conn.client, keys, params.run_id)
    if refusal is None:
        log.info("run %s: a task may run more than once (master %s): claim and hand-over in "
                 "one pass, each claim step journaled in Redis (%s*)", params.run_id, master,
                 prefix)
        try:
            return _one_pass(settings, params, unit_df, prefix, histograms)
        finally:
            drop_journals(conn.client, keys)
    log.info("run %s: a task may run more than once (master %s) and the claim journal cannot "
             "be kept in Redis (%s): the claim is materialised before the hand-over, which "
             "is slower (grant ACL SETUSER <user> ~<claim.journal_prefix>* +rpush +lrange "
             "+expire +del; docs/ACL.md line 8)", params.run_id, master,
             refusal)
    return _claim_then_apply(spark, settings, params, unit_df, histograms, after_claim)


def _one_pass(settings: Settings, params: JobParams, unit_df: DataFrame,
              journal_prefix: str | None, histograms: bool) -> Tallies:
    """Claim and hand over each claim step at once (small ones gathered into hand-overs of up
    to LEASE_ROWS entries, or of Spark's Arrow batch size where that is smaller), in one
    Spark stage; the tallies."""
    started = time.monotonic()
    make = recover_partition(params, histograms, journal_prefix,
                             rows=min(LEASE_ROWS, batch_rows(unit_df.sparkSession)))
    tallies = write_pass(unit_df, make, settings.report.path, params.run_id, True,
                         params.scheduler_run_id)
    log.info("run %s: claim, dead-letter, handler, acks and report done in %.1f s",
             params.run_id, time.monotonic() - started)
    return tallies


def batch_rows(spark: SparkSession) -> int:
    """Spark's Arrow batch size (rows): the hand-over's step."""
    return int(spark.conf.get(MAX_RECORDS_PER_BATCH) or DEFAULT_RECORDS_PER_BATCH)


def _claim_then_apply(spark: SparkSession, settings: Settings, params: JobParams,
                      unit_df: DataFrame, histograms: bool,
                      after_claim: Callable[[], None] | None) -> Tallies:
    """Claim first, materialised exactly once, then dead-letter, handle, ack and report in a
    second stage (a retried hand-over reports from the materialised claim); the tallies."""
    started = time.monotonic()
    claim = claim_partition(params, histograms)
    claimed = materialise_once(unit_df.mapInArrow(claim, PACKED))
    if after_claim is not None:
        after_claim()
    log.info("run %s: claim done in %.1f s", params.run_id, time.monotonic() - started)
    # The hand-over works in steps of Spark's usual Arrow batch size (rows of entries); the
    # JVM sends it as many packs at a time as make about one such step.
    rows = batch_rows(spark)
    started = time.monotonic()
    with session_conf(spark, {MAX_RECORDS_PER_BATCH: str(max(1, rows // PACK_ROWS))}):
        tallies = write_pass(claimed, apply_partition(params, rows), settings.report.path,
                             params.run_id, False, params.scheduler_run_id)
    log.info("run %s: dead-letter, handler, acks and report done in %.1f s", params.run_id,
             time.monotonic() - started)
    return tallies
