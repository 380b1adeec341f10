"""The Spark side of a run's report: the pass that writes its per-entry Parquet rows
(``write_pass``) and reads them back, the group health files, and the summary filled in from
what the pass counted (``fill_summary``). What a run did, as a plain description, is
``recovery.report.summary.RunSummary``."""

from __future__ import annotations

import logging
import secrets
from pathlib import Path

import pyarrow as pa
import redis
from pyspark.sql import DataFrame, Observation, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StringType

from recovery.errors import ConfigError
from recovery.executor.claim.backoff import NotDue
from recovery.executor.handover.modes import ACTIONS, ModeOptions, ReprocessMode
from recovery.executor.tally import (
    TALLIED,
    TALLY,
    PassMaker,
    Tallies,
    not_due_counts,
    read_tallies,
    refused_units,
    tallied,
    unit_counts,
)
from recovery.redis_io.dlq_names import DeadLetterNames
from recovery.report.summary import RunSummary
from recovery.report.worker_files import local_directory, write_by_driver, write_by_workers
from recovery.rows import HealthRow, Skipped, UnitCounts, unit_key
from recovery.schemas import HEALTH, REPORT, SCHEDULER_RUN_ID, Action, arrow, stamped
from recovery.targets.keys import refused_targets

log = logging.getLogger(__name__)


def run_path(base: str, run_id: str) -> str:
    """Where one run's per-entry Parquet files go (Hive-style partition by run)."""
    return f"{base.rstrip('/')}/entries/run_id={run_id}"


def health_path(base: str, run_id: str) -> str:
    """Where one run's group health (one row per stream and group) goes."""
    return f"{base.rstrip('/')}/health/run_id={run_id}"


def check_report_location(path: str) -> None:
    """Fail early (exit 2) when a local report directory cannot be written."""
    local = local_directory(path)
    if local is None:
        return  # remote file systems are checked by the write itself
    probe = local
    while not probe.exists():
        probe = probe.parent
    if not probe.is_dir() or not _writable(probe):
        raise ConfigError(
            f"report.path {path}: {probe} is not a writable directory; "
            "point report.path at a directory the job may write"
        )


def _writable(directory: Path) -> bool:
    try:
        with open(directory / f".recovery-probe-{secrets.token_hex(4)}", "w") as fh:
            Path(fh.name).unlink()
        return True
    except OSError:
        return False


def write_report(report: DataFrame, base: str, run_id: str,
                 scheduler_run_id: str | None = None) -> list[str]:
    """Write one run's REPORT rows to ``<base>/run_id=<run id>/`` (Hive-style, so reading
    `base` gives every run with a run_id column), each with `scheduler_run_id` (null: None);
    an empty run still gets its directory.

    `report` is a tallied pass's output (``recovery.executor.tally.TALLIED``): its tally rows are
    observed during the write, not written, and returned (JSON texts, one per task).
    """
    observation = Observation()
    observed = report.observe(observation, F.collect_list(TALLY).alias("tallies"))
    rows = observed.where(F.col(TALLY).isNull()).drop(TALLY).withColumn(
        SCHEDULER_RUN_ID.name, F.lit(scheduler_run_id).cast(StringType()))
    rows.write.mode("append").parquet(run_path(base, run_id))
    return list(observation.get["tallies"])


def write_pass(frame: DataFrame, make: PassMaker, base: str, run_id: str,
               by_workers: bool, scheduler_run_id: str | None = None) -> Tallies:
    """Run the report pass `make` makes over `frame` and write its REPORT rows to
    ``run_path(base, run_id)``, each with `scheduler_run_id`; returns the tallies (one per
    task, read).

    With `by_workers` (one pass, the per-key ordered hand-over) and a local report
    directory, the Python workers write the files (``recovery.report.worker_files``); otherwise
    Spark's writer does (``write_report``).
    """
    directory = local_directory(run_path(base, run_id)) if by_workers else None
    if directory is None:
        return read_tallies(write_report(frame.mapInArrow(tallied(make), TALLIED), base,
                                         run_id, scheduler_run_id))
    return read_tallies(write_by_workers(frame, make, directory, scheduler_run_id))


def read_run(spark: SparkSession, base: str, run_id: str) -> DataFrame:
    """The report rows of one run (REPORT: the run id is in the path). Read with the known schema:
    inferring it costs a Spark job that reads a footer. Spark reads a path as a Hadoop glob:
    the run ID's glob characters are escaped, so ``r[1]`` or ``r*`` reads its own partition,
    never another run's (``r1``)."""
    return read_run_dir(spark, run_path(base, hadoop_literal(run_id)))


HADOOP_GLOB = "\\{}[]*?"  # the characters a Hadoop glob (Spark's path reading) treats as special


def hadoop_literal(name: str) -> str:
    """`name` as a Hadoop glob that matches it literally (a backslash before each special)."""
    return "".join(f"\\{c}" if c in HADOOP_GLOB else c for c in name)


def read_run_dir(spark: SparkSession, run_dir: str) -> DataFrame:
    """The report rows in one run's directory (``run_path``), read with the REPORT schema."""
    return spark.read.schema(REPORT).parquet(run_dir)


def fill_summary(summary: RunSummary, tallies: Tallies, skipped: list[Skipped],
                 actions: tuple[str, ...] = ACTIONS) -> None:
    """Totals and unit rows from the report passes' tallies (one per task); under
    a backoff schedule (``summary.backoff`` set), each unit's entries not due as well, also
    for units with nothing else to report."""
    summary.units = unit_counts(tallies, actions)
    if summary.backoff is not None:
        summary.units = _with_not_due(summary.units, not_due_counts(tallies), actions)
        summary.not_due = sum(u.not_due or 0 for u in summary.units)
        summary.next_due_ms = min((u.next_due_ms for u in summary.units
                                   if u.next_due_ms is not None), default=None)
    summary.totals = {action: sum(u.entries(action) for u in summary.units)
                      for action in actions}
    refused = [Skipped(stream, group, reason)
               for (stream, group), reason in sorted(refused_units(tallies).items())]
    summary.skipped = list(skipped)
    _add_skipped(summary, refused)  # a unit error: the over-limit entries stay pending


def _with_not_due(units: list[UnitCounts], waiting: dict[tuple[str, str], NotDue],
                  actions: tuple[str, ...]) -> list[UnitCounts]:
    """`units` and the units only `waiting` names, sorted, each with its entries not due
    and when the first becomes due (0 and None for a unit with none)."""
    rows = {unit_key(u): u for u in units}
    for key in waiting.keys() - rows.keys():
        rows[key] = UnitCounts(*key, dict.fromkeys(actions, 0))
    return [rows[key].with_not_due(*((waiting[key].entries, waiting[key].next_due_ms)
                                     if key in waiting else (0, None)))
            for key in sorted(rows)]


def _add_skipped(summary: RunSummary, refused: list[Skipped]) -> None:
    """Log each refusal, add it to the summary's skipped rows; anything skipped makes an
    ``ok`` run ``partial``."""
    for refusal in refused:
        log.warning("%s / %s: %s", refusal.stream, refusal.group, refusal.reason)
    summary.skipped += refused
    if summary.skipped and summary.status == "ok":
        summary.status = "partial"


def add_refused_targets(summary: RunSummary, client: redis.Redis,
                        names: DeadLetterNames, newest: bool = False) -> None:
    """A dry run's skipped rows for the units that would dead-letter into a stream the move
    script refuses (``recovery.targets.keys.refused_targets``): status ``partial``, as the
    real run's."""
    pairs = [unit_key(u) for u in summary.units if u.entries(Action.WOULD_DEAD_LETTER)]
    _add_skipped(summary, refused_targets(client, names, pairs, newest) if pairs else [])


def add_refused_mode_targets(summary: RunSummary, client: redis.Redis, mode: ReprocessMode,
                             options: ModeOptions) -> None:
    """A dry run's skipped rows for the units whose re-processing a real run in `mode`
    (with its settings `options`) would skip (``ReprocessMode.refused_targets``: e.g. a
    requeue into a key of another type): status ``partial``, as the real run's."""
    pairs = [unit_key(u) for u in summary.units if u.entries(mode.planned)]
    _add_skipped(summary, mode.refused_targets(client, pairs, options) if pairs else [])


def write_health(spark: SparkSession, health: list[HealthRow], base: str,
                 run_id: str, scheduler_run_id: str | None = None) -> None:
    """Group health rows as Parquet (one per stream and group), each with
    `scheduler_run_id`: written by the driver itself into a local directory, else handed to
    Spark's writer as one Arrow table (no Python worker task just to turn rows into Rows)."""
    if not health:
        return
    table = stamped(pa.Table.from_pylist([h.as_dict() for h in health], schema=arrow(HEALTH)),
                    scheduler_run_id)
    local = local_directory(health_path(base, run_id))
    if local is not None:
        write_by_driver(table, local)
    else:
        spark.createDataFrame(table).write.mode("append").parquet(health_path(base, run_id))


