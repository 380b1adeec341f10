"""The recovery run, orchestrated on the driver.

1. validate settings and handler, check the server, discover and spread the units (the JVM
   warms up meanwhile: ``recovery.driver.warm_up``);
2. group health as found (XINFO on the driver; PEL histograms from the claim steps' own
   reads, or, in a dry run, from an executor pass of their own);
3. claim on executors, each entry joined with its PEL row (delivery count);
4. route, dead-letter, handle and ack on executors, on the claim's own partitions (no
   shuffle), while writing the per-entry report (to a local directory, by the Python
   workers themselves: ``recovery.report.worker_files``). Each claim step is handed over at
   once, in the same task. When Spark may run a task twice (a cluster, local[N,F]), each
   step's IDs are first journaled in Redis (``recovery.redis_io.journal``), so that a
   retried attempt reports what its failed attempt claimed; where the journal cannot be
   kept (the ACL user may not write it), the claimed set is instead materialised exactly
   once (eager local checkpoint of packed claim steps) before a second stage hands it over;
   with per-key order (``order.key_field``), steps 3 and 4 are ``recovery.driver.ordered``:
   the claim materialised, then shuffled by key and handed over key by key in ID order;
5. remove the job's empty consumers (whose script's PEL summaries the final progress line
   uses), sum up the tallies that came with the report's write (``recovery.executor.tally``).
"""

from __future__ import annotations

import contextlib
import logging
import time
from dataclasses import dataclass, field, replace
from functools import partial

from pyspark.sql import DataFrame, SparkSession
from redis.cluster import RedisCluster

from recovery.driver.discovery import (
    WorkUnit,
    assign,
    discover,
    job_consumer_stem,
)
from recovery.driver.handler_choice import check_handler
from recovery.driver.health import (
    add_histograms,
    clean_up_job_consumers,
    collect_health,
    format_health,
    remove_idle_consumers,
)
from recovery.driver.ordered import (
    add_held_keys,
    check_order,
    claim_then_order,
    ordered_actions,
    refuse_holds_elsewhere,
)
from recovery.driver.passes import batch_rows, recover
from recovery.driver.plan import (
    check_plan,
    new_manifest,
    plan_units,
    planned_frame,
    planned_params,
    read_manifest,
    server_identity,
    write_manifest,
)
from recovery.driver.progress.frontier import parts_order, progress_parts
from recovery.driver.progress.reporter import ProgressReporter
from recovery.driver.run_ids import (
    claimed_partition,
    refuse_reported_run_id,
    refuse_traced_run_id,
    registered_run,
)
from recovery.driver.split import Split, split_units
from recovery.driver.warm_up import WarmUp, warming_up
from recovery.executor.handover.modes import ACTIONS, PLAN_ACTIONS, mode_of
from recovery.executor.histogram import kept_ids, merged_rows
from recovery.executor.survey import histogram_partition, plan_partition
from recovery.executor.tally import Tallies, acked_deletions, histogram_rows, uncertain_moves
from recovery.params import JobParams, Unit, is_job_consumer, new_run_id
from recovery.redis_io.dlq_names import refuse_cross_slot
from recovery.redis_io.redis_conn import RedisConn
from recovery.report.after_run import add_after_run
from recovery.report.console_links import console_links
from recovery.report.run_report import (
    add_refused_mode_targets,
    add_refused_targets,
    check_report_location,
    fill_summary,
    health_path,
    read_run,
    run_path,
    write_health,
    write_pass,
)
from recovery.report.signatures import failed_errors, failed_warning, uncertain_warning
from recovery.report.summary import RunSummary, due_time, format_table, health_totals
from recovery.rows import HealthRow, HistogramRow
from recovery.schemas import (
    PEL_HISTOGRAM,
    REPORT,
    Action,
)
from recovery.settings.model import Settings, executor_params
from recovery.spark.errors import spark_errors
from recovery.spark.tasks import (
    check_no_speculation,
    retries_tasks,
)
from recovery.spark.transforms import units_of_parts
from recovery.targets.dead_letter_streams import dead_letter_warnings
from recovery.targets.keys import check_features, check_server, may_read_stream_info

log = logging.getLogger(__name__)


def run(spark: SparkSession, settings: Settings, run_id: str | None = None,
        dry_run: bool = False, plan: str | None = None, *, checked: bool = False,
        scheduler_run_id: str | None = None) -> RunSummary:
    """One recovery run (or, with `dry_run`, its plan: nothing is written to Redis; or, with
    `plan`, a dry run's report directory, exactly the entries it planned: ``driver.plan``).
    `checked`: the caller made the pre-flight checks just before, on these settings (the
    job's command, ``recovery.jobs.recover.RecoverJob``, before the session started): the
    handler, the order settings, the report location and the server are not checked again.
    `scheduler_run_id`: the scheduler's own id of the run (``--scheduler-run-id``), kept in
    the summary and on every row of the report and health files.

    Raises RecoveryError subclasses for what it cannot do.
    """
    started, started_ms = time.monotonic(), int(time.time() * 1000)
    check_no_speculation(spark.conf.get("spark.speculation", "false"))
    params = executor_params(settings, run_id or new_run_id(), scheduler_run_id)
    if not checked:
        check_handler(settings, dry_run)  # none by default: handler mode names one
        check_order(settings, dry_run, plan)
        check_report_location(settings.report.path)
    if run_id is not None:  # a run ID is used once (recovery.driver.run_ids)
        refuse_reported_run_id(spark, settings, run_id)
    conn = RedisConn.open(params.redis)
    client = conn.client
    # The JVM warms up (recovery.driver.warm_up) while the driver reads Redis.
    with conn, warming_up(spark) as warm_up, contextlib.ExitStack() as stack:
        if run_id is not None:  # this run's alone, before anything is written (run_ids)
            stack.enter_context(claimed_partition(settings, run_id))
        if not checked:
            check_server(conn)
        params = replace(params, features=check_features(conn, settings))
        if run_id is not None:  # a dry run too: it writes into the ID's report partition
            refuse_traced_run_id(conn, settings, params.run_id)
        server = server_identity(conn)
        warnings: list[str] = []  # a selection that matched nothing (discovery)
        quiet: list[WorkUnit] = []  # selected groups with nothing pending: health only
        if plan is not None:
            manifest = read_manifest(plan, spark)
            check_plan(plan, manifest, settings, server)  # type: ignore[arg-type]
            params = planned_params(params, manifest)  # type: ignore[arg-type]
            units, skipped = plan_units(spark, conn, settings, plan)
        else:
            units, skipped = discover(conn, settings, warnings, quiet)
        # Where the user may run XINFO STREAM (discovery's reads show it; on a Redis Cluster
        # or with --plan, where discovery never tries it, ask once), the move script checks
        # the newest entry of each dead-letter stream as well as its oldest.
        params = replace(params, dlq_check_newest=bool(units) and (
            all(u.seen is not None for u in units)
            or ((plan is not None or isinstance(client, RedisCluster))
                and may_read_stream_info(client, units[0].stream))))
        names = settings.dead_letter.names  # on a cluster, names in the sources' slots only
        refuse_cross_slot(client, names, [(u.stream, names.key(u.stream, u.group)) for u in units])
        refuse_holds_elsewhere(conn, params, units, dry_run)  # holds where this run reads
        log.info("run %s: %d units with pending entries, %d skipped%s", params.run_id,
                 len(units), len(skipped), " (dry run)" if dry_run else "")
        registration = contextlib.nullcontext() if dry_run else registered_run(
            conn, settings, params.run_id, run_id is not None, warnings)
        stack.enter_context(registration)  # before the run's first write
        summary = RunSummary(params.run_id, dry_run=dry_run, plan=plan, warnings=warnings,
                             report_path=run_path(settings.report.path, params.run_id),
                             scheduler_run_id=scheduler_run_id)
        summary.dead_letter_warnings = dead_letter_warnings(conn, settings)
        if params.backoff:
            summary.backoff = {"factor": params.backoff_factor, "max_ms": params.backoff_max_ms}
        actions = ordered_actions(PLAN_ACTIONS if dry_run else ACTIONS, params, dry_run)
        with spark_errors():
            tallies = []
            run_ctx = RunContext(spark, conn, settings, params, dry_run, plan,
                                 collect_health(conn, quiet, names) if quiet else [])
            if units:
                tallies = _run_units(run_ctx, units, summary, warm_up)
                write_manifest(spark, summary.report_path,  # type: ignore[arg-type]
                               new_manifest(params, dry_run, started_ms, server))
            else:
                summary.report_path = None
                if quiet:  # every run that found groups leaves a health snapshot
                    _write_health(run_ctx, [], summary)
            fill_summary(summary, tallies, skipped, actions)
            if settings.reprocess.delete_acked and not dry_run:
                summary.acked_deletions = done = acked_deletions(tallies)
                log.info("run %s: %d entries deleted with their ack, %d kept (another consumer "
                         "group still references them)", params.run_id, done.deleted, done.kept)
            if dry_run:  # what the move script would refuse (a real run's tallies tell it)
                add_refused_targets(summary, client, names, params.dlq_check_newest)
                add_refused_mode_targets(summary, client, mode_of(settings.reprocess.mode),
                                         settings.reprocess.options())
            summary.mark_selected(len(units) + len(quiet))
            if summary.status == "empty" and not warnings:  # (discovery warned of a match)
                log.warning("run %s: nothing selected: no stream with a selected group "
                            "(streams.keys, streams.match, streams.groups)", params.run_id)
            if units and Action.HELD in actions:
                add_held_keys(spark, settings, summary)
            if (units or quiet) and not dry_run:
                add_after_run(summary, client, [(u.stream, u.group) for u in [*units, *quiet]],
                              names, settings.claim.consumer_prefix)
            if not dry_run:
                summary.console_links = console_links(
                    settings.dead_letter.console_url,
                    (names.key(u.stream, u.group) for u in summary.units
                     if u.entries(Action.DEAD_LETTERED)))
            if not dry_run and summary.totals[Action.FAILED]:
                summary.failed_errors = failed_errors(
                    read_run(spark, settings.report.path, params.run_id))
                log.warning("%s", failed_warning(params.run_id, summary.totals[Action.FAILED],
                                                 summary.failed_errors))
            if uncertain := uncertain_moves(tallies):
                summary.uncertain = uncertain
                summary.warnings.append(uncertain_warning(params.run_id, uncertain))
                log.warning("%s", summary.warnings[-1])
    summary.duration_s = round(time.monotonic() - started, 3)
    if summary.not_due:
        log.info("run %s: %d entries left pending, not due yet under the backoff schedule; "
                 "the first becomes due at %s", params.run_id, summary.not_due,
                 due_time(summary.next_due_ms))
    log.info("run %s summary\n%s", params.run_id,
             format_table(summary, settings.report.log_units_max))
    return summary


def pending_entries(spark: SparkSession, settings: Settings) -> DataFrame:
    """Read-only: the pending entries a run would claim now (idle at least
    ``claim.min_idle_ms``; under a backoff schedule, only those due), one row per entry:
    ``stream``, ``group``, ``id``, ``previous_consumer`` (its owner now),
    ``delivery_count`` (as the run's claim would make it, with a requeued copy's carried
    deliveries), ``idle_ms`` and ``action``, what a run would do (``would_reprocess`` /
    ``would_requeue`` / ``would_reassign``, ``would_dead_letter``, ``deleted``): a dry
    run's report (schema REPORT), read back.
    Claims nothing; writes only the dry run's report and health files."""
    summary = run(spark, settings, dry_run=True)
    if summary.report_path is None:  # nothing pending anywhere
        return spark.createDataFrame([], REPORT)
    return read_run(spark, settings.report.path, summary.run_id)


@dataclass(frozen=True)
class RunContext:
    """One run's fixed surroundings on the driver: the session, the Redis connection, the
    settings, what travels to the executors, and the kind of run (a dry run, or one that
    applies the plan in the dry run's report directory `plan`), and the health rows of the
    selected groups with nothing pending (``quiet_health``: written with the others)."""

    spark: SparkSession
    conn: RedisConn
    settings: Settings
    params: JobParams
    dry_run: bool = False
    plan: str | None = None
    quiet_health: list[HealthRow] = field(default_factory=list)


def _run_units(ctx: RunContext, units: list[WorkUnit], summary: RunSummary,
               warm_up: WarmUp | None = None) -> Tallies:
    """Health (as found), the plan or the recovery (of the plan's entries, if the run applies
    one), then housekeeping; Spark's work waits for `warm_up`, if given. Returns the report
    passes' tallies (``recovery.executor.tally``)."""
    spark, conn, settings, params = ctx.spark, ctx.conn, ctx.settings, ctx.params
    client = conn.client
    dry_run, plan = ctx.dry_run, ctx.plan
    no_retries = not retries_tasks(str(spark.conf.get("spark.master", "") or ""))
    # A run counts the PEL histograms in its claim steps' own reads (either path); a dry
    # run, which claims nothing, and a run that claims planned IDs read the PELs in a pass
    # of their own.
    in_pass = not dry_run and plan is None and settings.report.pel_histograms
    holding = params.order is not None and not params.order.dead_letter_releases
    health = collect_health(conn, units, settings.dead_letter.names,
                            settings.order.hold_prefix if holding else None)
    if warm_up is not None:
        warm_up.wait()
    # A run that claims spreads each big PEL over several tasks (recovery.driver.split).
    with split_units(client, units, settings.spark.partitions,
                     settings.spark.split_min_pending, settings.claim.count, params.run_id,
                     wanted=not dry_run and plan is None) as split:
        unit_df, consumers, parts = _unit_frame(ctx, units, split)
        if split is not None:
            split.assigned(parts, params.run_id)
        if settings.report.pel_histograms and not in_pass:
            hist_df = unit_df.mapInArrow(histogram_partition(params), PEL_HISTOGRAM)
            health = add_histograms(health, [HistogramRow.from_mapping(r.asDict())
                                             for r in hist_df.collect()])  # a row per unit
        if not in_pass:
            _write_health(ctx, health, summary)
        if dry_run:
            return write_pass(unit_df, plan_partition(params), settings.report.path,
                              params.run_id, no_retries, params.scheduler_run_id)
        # A planned run's parts take their entries in the plan's order: ticks read round robin.
        order = None if plan is not None else parts_order(
            [(u.stream, u.group) for u in units], progress_parts(parts))
        with ProgressReporter(conn, units, settings.dead_letter.names,
                              settings.claim.consumer_prefix, params.run_id,
                              settings.report.progress_interval_s, health, order) as pr:
            work = unit_df if plan is None else planned_frame(
                spark, plan, parts, max(p for _, p in parts) + 1)
            # What a split unit's parts left: read once the claim is done, before the hand-over
            # where the claim is materialised, outside the ranges the parts' steps took (each
            # part counted what was left in its own: recovery.executor.claim.loop.ranges_left);
            # else after the pass, but the entries the parts claimed and kept pending (their
            # steps counted them as found).
            stem = job_consumer_stem(settings.claim.consumer_prefix, params.run_id)
            read_left = partial(split.left_rows, client, partial(is_job_consumer, stem=stem)) \
                if split is not None and in_pass else None
            early: list[list[HistogramRow]] = []
            after_claim = (lambda: early.append(read_left({}, True))) if read_left else None
            if params.order is not None:  # per-key order: recovery.driver.ordered
                tallies = claim_then_order(spark, conn, settings, params, work, units,
                                           sorted({c for _, _, c in consumers}), in_pass,
                                           batch_rows(spark), after_claim)
            else:
                tallies = recover(spark, conn, settings, params, work, consumers,
                                  not dry_run and no_retries, in_pass, after_claim)
            if in_pass:  # the histograms came with the report pass, as its claim steps found
                # them; a split unit's parts' added up, with what they left
                rows = histogram_rows(tallies)
                kept = kept_ids(rows)  # claimed, still pending: counted by the parts' steps
                left = early[0] if early else read_left(kept) if read_left else []
                health = add_histograms(health, merged_rows([*rows, *left]))
                _write_health(ctx, health, summary)
            # The clean-up reads each group's PEL summary: the final progress line uses them.
            pr.take_final_summaries(clean_up_job_consumers(
                conn, health, consumers, settings.claim.consumer_prefix).summaries)
        idle_ms = settings.housekeeping.remove_idle_consumers_ms
        if idle_ms is not None:
            remove_idle_consumers(conn, health, idle_ms)
        return tallies


def _write_health(ctx: RunContext, health: list[HealthRow], summary: RunSummary) -> None:
    """Write and log the group health, with the groups that have nothing pending; its
    headline goes into the summary."""
    settings, params = ctx.settings, ctx.params
    health = [*health, *ctx.quiet_health]
    summary.health, summary.unit_health = health_totals(health), health
    summary.health_path = health_path(settings.report.path, params.run_id) if health else None
    write_health(ctx.spark, health, settings.report.path, params.run_id,
                 params.scheduler_run_id)
    log.info("run %s group health\n%s", params.run_id,
             format_health(health, settings.report.log_units_max))


def _unit_frame(ctx: RunContext, units: list[WorkUnit], split: Split | None = None
                ) -> tuple[DataFrame, list[tuple[str, str, str]], list[tuple[Unit, int]]]:
    """The units as a small DataFrame with exactly one Spark partition per part (so parts
    never share a task, whatever the keys hash to), the (stream, group, job consumer)
    triples (several per unit split over several parts), and the (unit, part) pairs."""
    spark, settings, params = ctx.spark, ctx.settings, ctx.params
    parts = assign(units, settings.spark.partitions, settings.claim.consumer_prefix,
                   params.run_id, split.counts if split else None,
                   split.cursor if split else None)
    n = max(part for _, part in parts) + 1
    spark.conf.set("spark.sql.shuffle.partitions", str(n))
    by_part: list[list[dict]] = [[] for _ in range(n)]
    for unit, part in parts:
        by_part[part].append({**vars(unit), "part": part})
    consumers = sorted({(unit.stream, unit.group, unit.consumer) for unit, _ in parts})
    return units_of_parts(spark, by_part), consumers, parts
