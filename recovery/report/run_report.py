"""The run's report: per-entry Parquet rows, a per-stream table, a one-line JSON summary."""

from __future__ import annotations

import contextlib
import logging
import secrets
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import pyarrow as pa
import redis
from pyspark.sql import DataFrame, Observation, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StringType

from recovery.errors import (
    ConfigError,
    DeadLetterNameError,
    EmptySelectionError,
    FailureThresholdError,
)
from recovery.executor.handover.modes import ACTIONS
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
from recovery.redis_io.commands import key_types
from recovery.redis_io.dlq_names import DeadLetterNames, refused_requeue_reason, requeue_key
from recovery.redis_io.error_codes import TargetRefused
from recovery.report.console_links import link_lines
from recovery.report.json_line import JsonLine
from recovery.report.wording import plural
from recovery.report.worker_files import local_directory, write_by_driver, write_by_workers
from recovery.schemas import HEALTH, REPORT, SCHEDULER_RUN_ID, Action, arrow, stamped
from recovery.targets.keys import Skipped, refused_targets

log = logging.getLogger(__name__)

T = TypeVar("T")


@dataclass
class RunSummary(JsonLine):
    """What one run did: totals per action, a row per (stream, group), what it skipped."""

    run_id: str
    status: str = "ok"
    report_path: str | None = None
    # The run id of the scheduler that started this run (--scheduler-run-id, e.g. Airflow's
    # DAG run id), in full: the run's own run_id is the short form Redis names carry.
    scheduler_run_id: str | None = None
    totals: dict[str, int] = field(default_factory=lambda: dict.fromkeys(ACTIONS, 0))
    units: list[dict[str, Any]] = field(default_factory=list)
    skipped: list[dict[str, Any]] = field(default_factory=list)
    duration_s: float = 0.0
    error: str | None = None
    exit_code: int = 0  # the entry point's exit code (recovery.errors), set as it exits
    dry_run: bool = False
    health: dict[str, Any] = field(default_factory=dict)
    health_path: str | None = None
    # Dead-letter streams over a dead_letters.warn_* threshold
    # (recovery.targets.dead_letter_streams).
    dead_letter_warnings: list[dict[str, Any]] = field(default_factory=list)
    plan: str | None = None  # the dry run's report directory this run applied (--plan)
    # Under a backoff schedule ({"factor": f, "max_ms": ms or None}; None: off): entries left
    # alone, not due yet, and when the first becomes due (epoch ms). Each unit row has both.
    backoff: dict[str, Any] | None = None
    not_due: int = 0
    next_due_ms: int | None = None
    # Streams and groups the selection matched, pending or not (a plan: its groups); 0 is
    # status "empty", whatever was skipped. None: not known (the run stopped before).
    selected_units: int | None = None
    # Per-key order (order.key_field): the keys this run held (None: no order).
    held_keys: int | None = None
    oldest_held_age_s: float | None = None  # by its ID's time: recovery.driver.ordered
    # Selections that matched nothing (a typo in streams.keys / streams.match), as logged.
    warnings: list[str] = field(default_factory=list)
    # The failed entries by reason and error signature, most first (recovery.report
    # .signatures.failed_errors): {"reason", "signature", "entries", "example"} each.
    failed_errors: list[dict[str, Any]] = field(default_factory=list)
    # reprocess.delete_acked (recovery.executor.tally.acked_deletions): the entries whose ack
    # deleted them, those kept because another group still references them, per unit too;
    # None when the setting is off (or in a dry run).
    acked_deletions: dict[str, Any] | None = None
    # The metrics push (recovery.metrics.push): None when metrics are off.
    metrics: dict[str, Any] | None = None
    # The state right after the run (recovery.report.after_run; `health` is the state as
    # found before it): {"units", "pending", "dead_letter_length"}; None in a dry run.
    health_after: dict[str, Any] | None = None
    # dead_letter.console_url: each dead-letter stream the run wrote to -> its console page.
    console_links: dict[str, str] = field(default_factory=dict)
    # ...as read, per unit, for the metrics (kept out of the JSON line).
    after: Any = field(default=None, repr=False, metadata={"json": False})
    # The group health rows as found (recovery.driver.health), for the metrics: kept out of
    # the JSON line (the health files hold them).
    unit_health: list[dict[str, Any]] = field(default_factory=list, repr=False,
                                              metadata={"json": False})

    def failed_ratio(self) -> float:
        """Failed handler messages over all messages given to the handler (0 when none)."""
        handled = self.totals[Action.FAILED] + self.totals[Action.REPROCESSED]
        return self.totals[Action.FAILED] / handled if handled else 0.0

    def mark_selected(self, selected_units: int) -> None:
        """Record how many streams and groups were selected: none is status ``empty``,
        over ``partial`` (nothing at all can be recovered, whatever was skipped)."""
        self.selected_units = selected_units
        if selected_units == 0:
            self.status = "empty"

    def check_not_empty(self, fail_when_empty: bool) -> None:
        """Raise EmptySelectionError (exit 1) for status ``empty`` under
        ``streams.fail_when_empty``."""
        if fail_when_empty and self.status == "empty":
            raise EmptySelectionError(
                "nothing selected: no stream with a selected group matches streams.keys / "
                "streams.match (streams.fail_when_empty is on)")

    def check_failure_threshold(self, max_failed_ratio: float | None) -> None:
        """Raise FailureThresholdError (exit 1) when too many handled messages failed."""
        if max_failed_ratio is None or self.failed_ratio() <= max_failed_ratio:
            return
        self.status = "failed"
        raise FailureThresholdError(
            f"{self.failed_ratio():.1%} of handled messages failed, above "
            f"handler.max_failed_ratio {max_failed_ratio:.1%}: see the report at "
            f"{self.report_path}"
        )


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

    With `by_workers` (runs that claim and hand over in one pass) and a local report
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
    summary.totals = dict.fromkeys(actions, 0)
    summary.units = unit_counts(tallies, actions)
    for unit in summary.units:
        for action in actions:
            summary.totals[action] += int(unit[action])
    if summary.backoff is not None:
        _add_not_due(summary, tallies, actions)
    refused = [Skipped(stream, group, reason)
               for (stream, group), reason in sorted(refused_units(tallies).items())]
    for refusal in refused:  # a unit error: the over-limit entries stay pending, run after run
        log.warning("%s / %s: %s", refusal.stream, refusal.group, refusal.reason)
    skipped = [*skipped, *refused]
    summary.skipped = [asdict(s) for s in skipped]
    if skipped and summary.status == "ok":
        summary.status = "partial"


def add_refused_targets(summary: RunSummary, client: redis.Redis,
                        names: DeadLetterNames, newest: bool = False) -> None:
    """A dry run's skipped rows for the units that would dead-letter into a stream the move
    script refuses (``recovery.targets.keys.refused_targets``): status ``partial``, as the
    real run's."""
    pairs = [(u["stream"], u["group"]) for u in summary.units
             if u.get(Action.WOULD_DEAD_LETTER)]
    refused = refused_targets(client, names, pairs, newest) if pairs else []
    for refusal in refused:
        log.warning("%s / %s: %s", refusal.stream, refusal.group, refusal.reason)
    summary.skipped += [asdict(s) for s in refused]
    if refused and summary.status == "ok":
        summary.status = "partial"


def add_refused_requeue_targets(summary: RunSummary, client: redis.Redis,
                                template: str | None) -> None:
    """A dry run's skipped rows for the units that would requeue into a key of another type
    (the requeue script refuses it): status ``partial``, as the real run's."""
    if template is None:
        return
    targets = {}
    for u in summary.units:
        if u.get(Action.WOULD_REQUEUE):
            with contextlib.suppress(DeadLetterNameError):
                targets[(u["stream"], u["group"])] = requeue_key(u["stream"], u["group"],
                                                                 template)
    distinct = list(dict.fromkeys(targets.values()))
    kinds = dict(zip(distinct, key_types(client, distinct), strict=True))
    refused = []
    for (stream, group), key in targets.items():
        kind = kinds[key]
        kind = kind.decode() if isinstance(kind, bytes) else kind
        if isinstance(kind, str) and kind not in ("stream", "none") and key != stream:
            refused.append(Skipped(stream, group, refused_requeue_reason(
                key, TargetRefused(kind, "it is no stream"))))
    for refusal in refused:
        log.warning("%s / %s: %s", refusal.stream, refusal.group, refusal.reason)
    summary.skipped += [asdict(s) for s in refused]
    if refused and summary.status == "ok":
        summary.status = "partial"


def _add_not_due(summary: RunSummary, tallies: Tallies, actions: tuple[str, ...]) -> None:
    waiting = not_due_counts(tallies)
    rows = {(u["stream"], u["group"]): u for u in summary.units}
    for key in waiting.keys() - rows.keys():
        rows[key] = {"stream": key[0], "group": key[1], **dict.fromkeys(actions, 0), "total": 0}
    summary.units = [rows[key] for key in sorted(rows)]
    for key, unit in rows.items():
        unit["not_due"] = waiting[key].entries if key in waiting else 0
        unit["next_due_ms"] = waiting[key].next_due_ms if key in waiting else None
    summary.not_due = sum(u["not_due"] for u in summary.units)
    summary.next_due_ms = min((u["next_due_ms"] for u in summary.units
                               if u["next_due_ms"] is not None), default=None)


def due_time(epoch_ms: int | None) -> str:
    """An epoch-ms time as UTC text for the log (``2026-11-26T04:10:00Z``); '' for None."""
    if epoch_ms is None:
        return ""
    return datetime.fromtimestamp(epoch_ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def write_health(spark: SparkSession, health: list[dict[str, Any]], base: str,
                 run_id: str, scheduler_run_id: str | None = None) -> None:
    """Group health rows as Parquet (one per stream and group), each with
    `scheduler_run_id`: written by the driver itself into a local directory, else handed to
    Spark's writer as one Arrow table (no Python worker task just to turn dicts into rows)."""
    if not health:
        return
    table = stamped(pa.Table.from_pylist(health, schema=arrow(HEALTH)), scheduler_run_id)
    local = local_directory(health_path(base, run_id))
    if local is not None:
        write_by_driver(table, local)
    else:
        spark.createDataFrame(table).write.mode("append").parquet(health_path(base, run_id))


def health_totals(health: list[dict[str, Any]]) -> dict[str, Any]:
    """The health headline for the JSON summary: units, pending, oldest idle, stalest unit."""
    oldest = max(health, key=lambda h: h["oldest_idle_ms"] or -1, default=None)
    return {
        "units": len(health),
        "pending": sum(h["pending"] for h in health),
        "oldest_idle_ms": oldest["oldest_idle_ms"] if oldest else None,
        "oldest_unit": f"{oldest['stream']}/{oldest['group']}" if oldest else None,
    }


def format_table(summary: RunSummary, max_units: int = 0) -> str:
    """A fixed-width table of the per-unit counts, for the log; under a backoff schedule
    also each unit's entries not due and when the first becomes due (UTC). With `max_units`
    above 0, at most that many units are listed (``largest``: the most failed entries, then
    the most entries) and one line counts the others; the TOTAL row counts every unit."""
    actions = tuple(summary.totals)
    headers = ["stream", "group", *actions, "total"]
    units, unlisted = largest(summary.units, max_units,
                              lambda u: (u.get(Action.FAILED, 0), u["total"]))
    rows = [[str(u.get(h, "")) for h in headers] for u in units]
    rows.append(["TOTAL", "", *(str(summary.totals[a]) for a in actions),
                 str(sum(summary.totals.values()))])
    if summary.backoff is not None:
        headers += ["not_due", "next_due"]
        total = {"not_due": summary.not_due, "next_due_ms": summary.next_due_ms}
        for row, unit in zip(rows, [*units, total], strict=True):
            row += [str(unit.get("not_due", 0)), due_time(unit.get("next_due_ms"))]
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    if unlisted:
        lines.append(unlisted_line(unlisted, "the JSON summary's units"))
    for s in summary.skipped:
        lines.append(f"skipped {s['stream']}" + (f" / {s['group']}" if s["group"] else "")
                     + f": {s['reason']}")
    return "\n".join(lines + link_lines(summary.console_links))


def largest(rows: Sequence[T], limit: int, size: Callable[[T], Any]) -> tuple[list[T], int]:
    """The `limit` rows of `rows` with the largest `size` (ties: the earlier row), in their
    order, and how many were left out; all of them when `limit` is 0 or not exceeded."""
    if not limit or len(rows) <= limit:
        return list(rows), 0
    kept = sorted(range(len(rows)), key=lambda i: size(rows[i]), reverse=True)[:limit]
    return [rows[i] for i in sorted(kept)], len(rows) - limit


def unlisted_line(count: int, where: str) -> str:
    """The line under a log table that lists only some units: how many it leaves out and
    where every unit is (`where`)."""
    return (f"... and {count:,} more {plural(count, 'unit')} not listed (every unit: {where}; "
            "report.log_units_max)")
