"""What one recovery run did, as a plain description: the ``RunSummary`` that ``recovery.run``
returns and whose ``json_line()`` is stdout's last line, its health headline, and its
per-stream table for the log. Imports nothing heavy (no Spark, no Redis): a script, a test or
the metrics can read or build a summary without a session; the Spark pass that writes the
report and fills the summary in is ``recovery.report.run_report``."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, TypeVar

from recovery.errors import EmptySelectionError, FailureThresholdError
from recovery.report.console_links import link_lines
from recovery.report.json_line import JsonLine
from recovery.report.wording import plural
from recovery.rows import (
    AckedDeletions,
    AfterRun,
    DeadLetterWarning,
    FailedErrors,
    HealthRow,
    Skipped,
    UnitCounts,
)

T = TypeVar("T")
# The actions the failure ratio reads: ``recovery.schemas.Action``'s values (that module
# loads Spark's types; a test holds them equal).
FAILED, REPROCESSED = "failed", "reprocessed"


@dataclass
class RunSummary(JsonLine):
    """What one run did: totals per action, a row per (stream, group), what it skipped."""

    run_id: str
    status: str = "ok"
    report_path: str | None = None
    # The run id of the scheduler that started this run (--scheduler-run-id, e.g. Airflow's
    # DAG run id), in full: the run's own run_id is the short form Redis names carry.
    scheduler_run_id: str | None = None
    # Entries by action: every action column of the run (a dry run's: the plan's) once its
    # report pass is counted (recovery.report.run_report.fill_summary); empty before.
    totals: dict[str, int] = field(default_factory=dict)
    units: list[UnitCounts] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)
    duration_s: float = 0.0
    error: str | None = None
    exit_code: int = 0  # the entry point's exit code (recovery.errors), set as it exits
    dry_run: bool = False
    # The group health headline (health_totals): {"units", "pending", "oldest_idle_ms",
    # "oldest_unit"}.
    health: dict[str, Any] = field(default_factory=dict)
    health_path: str | None = None
    # Dead-letter streams over a dead_letters.warn_* threshold
    # (recovery.targets.dead_letter_streams).
    dead_letter_warnings: list[DeadLetterWarning] = field(default_factory=list)
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
    # Entries reported skipped as uncertain (recovery.executor.handover.resent): a call sent
    # again after its reply was lost, and the job cannot tell what became of them.
    uncertain: int = 0
    # The failed entries by reason and error signature, most first (recovery.report
    # .signatures.failed_errors): {"reason", "signature", "entries", "example"} each.
    failed_errors: list[FailedErrors] = field(default_factory=list)
    # reprocess.delete_acked (recovery.executor.tally.acked_deletions): the entries whose ack
    # deleted them, those kept because another group still references them, per unit too;
    # None when the setting is off (or in a dry run).
    acked_deletions: AckedDeletions | None = None
    # The metrics push (recovery.metrics.push): None when metrics are off.
    metrics: dict[str, Any] | None = None
    # The state right after the run (recovery.report.after_run; `health` is the state as
    # found before it): {"units", "pending", "dead_letter_length"}; None in a dry run.
    health_after: dict[str, Any] | None = None
    # dead_letter.console_url: each dead-letter stream the run wrote to -> its console page.
    console_links: dict[str, str] = field(default_factory=dict)
    # ...as read, per unit, for the metrics (kept out of the JSON line).
    after: AfterRun | None = field(default=None, repr=False, metadata={"json": False})
    # The group health rows as found (recovery.driver.health), for the metrics: kept out of
    # the JSON line (the health files hold them).
    unit_health: list[HealthRow] = field(default_factory=list, repr=False,
                                         metadata={"json": False})

    def failed_ratio(self) -> float:
        """Failed handler messages over all messages given to the handler (0 when none)."""
        failed = self.totals.get(FAILED, 0)
        handled = failed + self.totals.get(REPROCESSED, 0)
        return failed / handled if handled else 0.0

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


def due_time(epoch_ms: int | None) -> str:
    """An epoch-ms time as UTC text for the log (``2026-11-26T04:10:00Z``); '' for None."""
    if epoch_ms is None:
        return ""
    return datetime.fromtimestamp(epoch_ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def health_totals(health: list[HealthRow]) -> dict[str, Any]:
    """The health headline for the JSON summary: units, pending, oldest idle, stalest unit."""
    oldest = max(health, key=lambda h: h.oldest_idle_ms or -1, default=None)
    return {
        "units": len(health),
        "pending": sum(h.pending for h in health),
        "oldest_idle_ms": oldest.oldest_idle_ms if oldest else None,
        "oldest_unit": f"{oldest.stream}/{oldest.group}" if oldest else None,
    }


def format_table(summary: RunSummary, max_units: int = 0) -> str:
    """A fixed-width table of the per-unit counts, for the log; under a backoff schedule
    also each unit's entries not due and when the first becomes due (UTC). With `max_units`
    above 0, at most that many units are listed (``largest``: the most failed entries, then
    the most entries) and one line counts the others; the TOTAL row counts every unit."""
    actions = tuple(summary.totals)
    headers = ["stream", "group", *actions, "total"]
    units, unlisted = largest(summary.units, max_units,
                              lambda u: (u.entries(FAILED), u.total))
    rows = [[u.stream, u.group, *(str(u.counts.get(a, "")) for a in actions), str(u.total)]
            for u in units]
    rows.append(["TOTAL", "", *(str(summary.totals[a]) for a in actions),
                 str(sum(summary.totals.values()))])
    if summary.backoff is not None:
        headers += ["not_due", "next_due"]
        dues = [*((u.not_due, u.next_due_ms) for u in units),
                (summary.not_due, summary.next_due_ms)]
        for row, (not_due, next_due_ms) in zip(rows, dues, strict=True):
            row += [str(not_due or 0), due_time(next_due_ms)]
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    if unlisted:
        lines.append(unlisted_line(unlisted, "the JSON summary's units"))
    for s in summary.skipped:
        lines.append(f"skipped {s.stream}" + (f" / {s.group}" if s.group else "")
                     + f": {s.reason}")
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
