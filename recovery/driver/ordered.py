"""Per-key ordered recovery on the driver (``order.key_field``; README, "Per-key order").

1. claim on executors, as always, each entry given its ordering key in the same task
   (``recovery.executor.ordered.keyed_claim_partition``: no Python pass of its own for the
   keys), materialised once (``recovery.spark.tasks``);
2. per (stream, group), the keys held back by older entries pending on consumers that are
   not this run's (not idle yet, a live consumer's, a killed run's): one pipelined XINFO
   CONSUMERS per group on the driver tells which groups have any; for those only, a small
   read-only pass (``blocker_partition``), cached and broadcast to the join;
3. the entries shuffled by (stream, group, key) over ``spark.partitions`` tasks and sorted by
   ID within each, so every key's entries meet in one task in ID order whichever task or
   split part claimed them; then handed over key by key
   (``recovery.executor.handover.ordered``) and reported as the one pass reports (the
   workers' own files where ``report.path`` is local: ``recovery.report.worker_files``;
   a retried hand-over's report is dropped with it either way).
"""

from __future__ import annotations

import logging
import shlex
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from recovery.driver.balance import bucket_count, counter, spread, spread_by_key
from recovery.driver.discovery import WorkUnit, job_consumer_stem
from recovery.errors import ConfigError, DeadLetterNameError, HeldElsewhereError
from recovery.executor.ordered import (
    blocker_partition,
    keyed_claim_partition,
    ordered_partition,
)
from recovery.executor.tally import Tallies
from recovery.params import JobParams
from recovery.redis_io.held_keys import groups_consumers_with_pending, not_this_runs
from recovery.redis_io.journal import drop_journals, journal_key, open_journals
from recovery.redis_io.key_holds import (
    DEFAULT_HOLD_PREFIX,
    earlier_hold_key,
    hold_counts,
    hold_key,
    record_prefix,
    recorded_prefixes,
)
from recovery.redis_io.redis_conn import RedisConn
from recovery.report.run_report import read_run, write_pass
from recovery.report.summary import RunSummary
from recovery.schemas import BLOCKER, KEYED, Action
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


def refuse_holds_elsewhere(conn: RedisConn, params: JobParams, units: list[WorkUnit],
                           dry_run: bool) -> None:
    """Where dead-lettered heads hold their keys (``order.dead_letter_releases = false``),
    before anything is claimed: raise HeldElsewhereError (exit 2, nothing written) when a
    hash of held keys of an ordered unit of `units` holds keys where this run would not
    read them: under another prefix recorded in ``HOLD_PREFIXES`` (or the default one), or
    under the name an earlier version gave it (``earlier_hold_key``); the message names the
    hash, the one this run reads and the commands that move the holds. Else, in a run that
    writes, record ``order.hold_prefix`` there, before the run's first hold. One SMEMBERS,
    one HLEN per place looked at (pipelined), one SADD."""
    order = params.order
    if order is None or order.dead_letter_releases:
        return
    pairs = sorted({(u.stream, u.group) for u in units if order.field_of(u.stream) is not None})
    if not pairs:
        return
    client = conn.client
    with conn.errors():
        prefixes = sorted(recorded_prefixes(client) | {DEFAULT_HOLD_PREFIX, order.hold_prefix})
        places = _other_places(order.hold_prefix, prefixes, pairs)
        counts = hold_counts(client, list(places))
        found = [(name, places[name]) for name, n in zip(places, counts, strict=True) if n]
        if found:
            raise HeldElsewhereError(_held_elsewhere(order.hold_prefix, found))
        if not dry_run:
            record_prefix(client, order.hold_prefix)


@dataclass
class _Place:
    """A hash where holds of `pairs` (stream, group) may be that a run with another prefix
    would not read: a name under `prefix`, or (`earlier`) the name an earlier version gave
    it (ambiguous: several pairs may share one)."""

    prefix: str
    earlier: bool
    pairs: list[tuple[str, str]] = field(default_factory=list)

    def what(self) -> str:
        """What names the hash, for the refusal."""
        return (f"the name an earlier version of the job gave it, prefix {self.prefix!r}"
                if self.earlier else f"order.hold_prefix {self.prefix!r}")


def _other_places(prefix: str, prefixes: Sequence[str], pairs: Sequence[tuple[str, str]]
                  ) -> dict[str, _Place]:
    """Every name but `prefix`'s own where holds of `pairs` may be: under each of
    `prefixes`, the earlier name and (another prefix) the name."""
    places: dict[str, _Place] = {}
    for other in prefixes:
        for stream, group in pairs:
            try:
                names = [(earlier_hold_key(other, stream, group), True)]
                if other != prefix:
                    names.append((hold_key(other, stream, group), False))
            except DeadLetterNameError:
                continue  # no name in the stream's slot: discovery skipped it
            for name, earlier in names:
                places.setdefault(name, _Place(other, earlier)).pairs.append((stream, group))
    return places


# The operator's move of a hash of held keys into the hashes a run reads (KEYS[1] into
# KEYS[2], ...), then its DEL, in one atomic call: a key held already in a target keeps its
# head there (HSETNX), so nothing held is dropped. A hash with a value that is no
# '<head ID> <dead-letter ID>' is not the job's: refused (NOTHOLDS), nothing written.
MOVE_HOLDS = ('local f = redis.call("HGETALL", KEYS[1]) for i = 2, #f, 2 do '
              'if not string.find(f[i], "^%d+%-%d+ %d+%-%d+$") then return redis.error_reply('
              '"NOTHOLDS not a hash of held keys, nothing moved: " .. KEYS[1]) end end '
              'for i = 1, #f, 2 do for k = 2, #KEYS '
              'do redis.call("HSETNX", KEYS[k], f[i], f[i + 1]) end end '
              'return redis.call("DEL", KEYS[1])')


def move_holds_command(name: str, targets: Sequence[str]) -> str:
    """The ``redis-cli`` command that moves the holds of hash `name` into each of `targets`
    and deletes `name` (:data:`MOVE_HOLDS`; all in one hash slot)."""
    keys = " ".join(shlex.quote(k) for k in (name, *targets))
    return f"redis-cli EVAL {shlex.quote(MOVE_HOLDS)} {1 + len(targets)} {keys}"


def _held_elsewhere(prefix: str, found: list[tuple[str, _Place]]) -> str:
    """The refusal: the first hash found, what names it, the pairs it may hold keys of, and
    the command that moves its holds into the hashes this run reads for them."""
    name, place = found[0]
    units = ", ".join(f"stream {s!r} group {g!r}" for s, g in place.pairs)
    back = "" if place.earlier else f"set order.hold_prefix back to {place.prefix!r}, or "
    more = f" ({len(found) - 1} more hashes alike)" if len(found) > 1 else ""
    command = move_holds_command(name, [hold_key(prefix, s, g) for s, g in place.pairs])
    return (f"keys held behind dead letters ({units}) are recorded in {name!r} "
            f"({place.what()}), where this run (order.hold_prefix {prefix!r}) would not read "
            f"them and would hand their later entries over: {back}move them to the hash "
            f"this run reads: {command}{more}; docs/OPERATIONS.md, \"Keys held behind a "
            "dead letter\"")


def ordered_actions(actions: tuple[str, ...], params: JobParams, dry_run: bool
                    ) -> tuple[str, ...]:
    """The summary's action columns: with per-key order, ``held`` too (a real run), or, in
    a dry run where dead-lettered heads hold their keys, ``would_hold``."""
    if params.order is None:
        return actions
    if not dry_run:
        return (*actions, Action.HELD)
    return actions if params.order.dead_letter_releases else (*actions, Action.WOULD_HOLD)


def claim_then_order(spark: SparkSession, conn: RedisConn, settings: Settings,
                     params: JobParams, unit_df: DataFrame, units: list[WorkUnit],
                     consumers: list[str], histograms: bool, rows: int,
                     after_claim: Callable[[], None] | None = None) -> Tallies:
    """Claim (materialised once), key, shuffle by key, sort by ID, hand over in key order and
    report in steps of `rows` entries; the tallies. The run's claim journals (of its job
    `consumers`) hold only their header here, kept while the run lasts: what keeps a second
    run from taking the same ``--run-id`` (``check_run_id_unused``). `after_claim`, if
    given, is called once the claim is done, before anything is handed over."""
    prefix = settings.claim.journal_prefix
    keys = [journal_key(prefix, c) for c in consumers] if prefix else []
    with conn.errors():
        refusal = open_journals(conn.client, keys, params.run_id) if keys else None
    try:
        return _claim_then_order(spark, conn, settings, params, unit_df, units, histograms,
                                 rows, after_claim)
    finally:
        if keys and refusal is None:
            drop_journals(conn.client, keys)


def _claim_then_order(spark: SparkSession, conn: RedisConn, settings: Settings,
                      params: JobParams, unit_df: DataFrame, units: list[WorkUnit],
                      histograms: bool, rows: int,
                      after_claim: Callable[[], None] | None) -> Tallies:
    started = time.monotonic()
    partitions = settings.spark.partitions
    buckets, counts = bucket_count(partitions), counter(spark)
    claimed = materialise_once(unit_df.mapInArrow(
        keyed_claim_partition(params, histograms, counts, buckets), KEYED))
    if after_claim is not None:
        after_claim()
    log.info("run %s: claim done in %.1f s; handing over in per-key order", params.run_id,
             time.monotonic() - started)
    started = time.monotonic()
    stem = job_consumer_stem(settings.claim.consumer_prefix, params.run_id)
    assignment = None if counts is None else spread(counts.value, buckets, partitions)
    frame = ordered_frame(spark, params, claimed, held_back(conn, units, stem), partitions,
                          stem, assignment)
    tallies = write_pass(frame, ordered_partition(params, rows), settings.report.path,
                         params.run_id, True, params.scheduler_run_id)
    log.info("run %s: dead-letter, handler in per-key order, acks and report done in %.1f s",
             params.run_id, time.monotonic() - started)
    return tallies


def held_back(conn: RedisConn, units: list[WorkUnit], own_stem: str) -> list[tuple[str, str]]:
    """The (stream, group) pairs of `units` where a consumer that is not this run's
    (`own_stem`) owns pending entries after the claim: only their entries can hold a key
    back (one pipelined XINFO CONSUMERS per pair)."""
    pairs = sorted({(u.stream, u.group) for u in units})
    with conn.errors():
        found = groups_consumers_with_pending(conn.client, pairs)
    return [pair for pair, names in zip(pairs, found, strict=True)
            if any(not_this_runs(name, own_stem) for name in names)]


def ordered_frame(spark: SparkSession, params: JobParams, keyed: DataFrame,
                  pairs: list[tuple[str, str]], partitions: int, own_stem: str,
                  assignment: list[int] | None = None) -> DataFrame:
    """The claimed entries (`keyed`: KEYED rows) with their blockers (read for the (stream,
    group) `pairs` only), in `partitions` partitions by key (spread by `assignment`, or
    hashed: ``recovery.driver.balance.spread_by_key``), sorted by (stream, group, key) and
    ID within each."""
    frame = _with_blockers(spark, params, keyed, pairs, partitions, own_stem)
    return spread_by_key(frame, partitions, ORDER_COLUMNS, assignment) \
        .sortWithinPartitions(*ORDER_COLUMNS, "id_order")


def _with_blockers(spark: SparkSession, params: JobParams, keyed: DataFrame,
                   pairs: list[tuple[str, str]], partitions: int, own_stem: str
                   ) -> DataFrame:
    """`keyed` with ``blocked_by`` and ``unit_blocked_after`` (null where nothing holds
    back: no Spark pass at all when `pairs` is empty)."""
    if not pairs:
        nothing = F.lit(None).cast("string")
        return keyed.withColumns({"blocked_by": nothing, "unit_blocked_after": nothing})
    unit_rows = spark.createDataFrame(pairs, "stream string, group string") \
        .repartition(min(len(pairs), partitions))
    # Read once for both joins (the read is a pass over Redis, not to be run twice).
    blockers = unit_rows.mapInArrow(blocker_partition(params, own_stem), BLOCKER) \
        .localCheckpoint(eager=True)
    by_key = blockers.where(F.col("order_key").isNotNull())
    by_unit = blockers.where(F.col("order_key").isNull()).select(
        "stream", "group", F.col("blocked_by").alias("unit_blocked_after"))
    return keyed.join(F.broadcast(by_key), ["stream", "group", "order_key"], "left") \
        .join(F.broadcast(by_unit), ["stream", "group"], "left")


def add_held_keys(spark: SparkSession, settings: Settings, summary: RunSummary) -> None:
    """The summary's ``held_keys``: how many keys the run held (distinct stream, group and
    the ID their held entries wait behind, from the report; an entry held for itself, such
    as one without the key field, counts as a key), and ``oldest_held_age_s``: the age, by
    its ID's time, of the oldest entry a key waits behind (or of the oldest entry held for
    itself): how long that key has been held at least. 0 and None when nothing was held."""
    summary.held_keys = 0
    if not summary.totals.get(Action.HELD):
        return
    held = read_run(spark, settings.report.path, summary.run_id) \
        .where(F.col("action") == Action.HELD.value)
    behind = F.col("reason").startswith("held behind ")
    head = F.when(behind, F.regexp_extract("reason", r"^held behind (\S+)", 1)) \
        .otherwise(F.col("id"))
    heads = held.select("stream", "group", behind.alias("behind"), head.alias("head"))
    row = heads.groupBy().agg(
        F.count_distinct(F.when(F.col("behind"), F.concat_ws(" ", "stream", "group", "head")))
        .alias("keys"), F.sum(F.when(~F.col("behind"), 1).otherwise(0)).alias("alone"),
        F.min(F.split("head", "-").getItem(0).cast("long")).alias("oldest_ms")).first()
    assert row is not None
    summary.held_keys = int(row["keys"]) + int(row["alone"] or 0)
    if row["oldest_ms"] is not None:
        summary.oldest_held_age_s = round(max(0.0, time.time() - row["oldest_ms"] / 1000), 3)
