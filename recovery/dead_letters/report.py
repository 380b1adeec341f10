"""What a dead-letter read reports: where its Parquet views go, its JSON summary, and the
fixed-width tables it logs."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from recovery.report.json_line import JsonLine
from recovery.rows import (
    DeadLetterSignature,
    DeadLetterStreamRead,
    DeadLetterWarning,
    Skipped,
)

VIEWS = ("by_reason", "by_signature")
ENTRIES = "entries"


def views_path(base: str, run_id: str) -> str:
    """``<report.path>/dead_letters/run_id=<run id>``: the run's ``by_reason/``,
    ``by_signature/`` and, with ``dead_letters.write_entries``, ``entries/``."""
    return f"{base.rstrip('/')}/dead_letters/run_id={run_id}"


@dataclass
class DeadLetterSummary(JsonLine):
    """One dead-letter read: per dead-letter stream its status (``read``, ``empty``,
    ``missing``), XLEN and oldest age (s) when looked at, and the dead letters read; totals;
    the top error signatures; warnings (``dead_letter_warnings``); skipped keys (a key of
    another type, a source without a dead-letter name) with the reason; with retention on,
    the letters trimmed (``retention``: the limits, the total and one row per stream)."""

    run_id: str
    status: str = "ok"
    # The run id of the scheduler that started this run (--scheduler-run-id, e.g. Airflow's
    # DAG run id), in full: the run's own run_id is the short form Redis names carry.
    scheduler_run_id: str | None = None
    dry_run: bool = False  # retention counted what it would trim and trimmed nothing
    totals: dict[str, int] = field(default_factory=lambda: {
        "dead_letter_streams": 0, "read": 0, "empty": 0, "missing": 0, "dead_letters": 0,
        "without_metadata": 0})
    streams: list[DeadLetterStreamRead] = field(default_factory=list)
    top_signatures: list[DeadLetterSignature] = field(default_factory=list)
    dead_letter_warnings: list[DeadLetterWarning] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)
    report_path: str | None = None
    duration_s: float = 0.0
    error: str | None = None
    exit_code: int = 0  # the entry point's exit code (recovery.errors), set as it exits
    # A selection that matched nothing; retention stopped short of a limit (a stream where it
    # met an entry that is not a letter of a selected source).
    warnings: list[str] = field(default_factory=list)
    metrics: dict[str, Any] | None = None  # the metrics push (None: metrics off)
    # The retention's trims (recovery.dead_letters.retention.apply_retention; None: off).
    retention: dict[str, Any] | None = None
    # dead_letter.console_url: each dead-letter stream read -> its console page.
    console_links: dict[str, str] = field(default_factory=dict)


def plain(value: object) -> object:
    """A view cell for JSON and the log: times as ISO 8601 text in UTC with their zone
    (Spark hands timestamps to Python as the driver's local time), the rest as is."""
    return iso_time(value) if isinstance(value, datetime) else value


def iso_time(value: datetime | None) -> str | None:
    """A timestamp cell as ``plain`` writes it (None stays None)."""
    return None if value is None else value.astimezone(UTC).isoformat()


def fixed_width(rows: list[dict[str, Any]], columns: list[str], width: int = 60) -> str:
    """`rows` as a fixed-width text table of `columns` (cells cut at `width` characters;
    null as ``-``)."""
    cells = [[("-" if r[c] is None else str(plain(r[c])))[:width] for c in columns]
             for r in rows]
    widths = [max([len(c), *(len(row[i]) for row in cells)]) for i, c in enumerate(columns)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True))]
    lines += ["  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True))
              for row in cells]
    return "\n".join(lines)
