"""What one redrive did (``jobs/redrive.py``'s JSON summary line): a plain description,
no Redis and no settings model, so the job's command class loads it before the settings."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from recovery.report.json_line import JsonLine
from recovery.rows import RedriveUnit, Skipped


@dataclass
class RedriveSummary(JsonLine):
    """What one redrive did; ``matched`` counts what a dry run would move."""

    run_id: str
    # The run id of the scheduler that started this run (--scheduler-run-id, e.g. Airflow's
    # DAG run id), in full: the run's own run_id is the short form Redis names carry.
    scheduler_run_id: str | None = None
    dry_run: bool = False
    status: str = "ok"
    totals: dict[str, int] = field(
        default_factory=lambda: {"examined": 0, "matched": 0, "redriven": 0})
    units: list[RedriveUnit] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)
    duration_s: float = 0.0
    error: str | None = None
    exit_code: int = 0  # the entry point's exit code (recovery.errors), set as it exits
    warnings: list[str] = field(default_factory=list)  # a selection that matched nothing
    metrics: dict[str, Any] | None = None  # the metrics push (None: metrics off)

    def add_unit(self, unit: RedriveUnit) -> None:
        """Add one dead-letter stream's row, and its counts to the totals."""
        self.units.append(unit)
        for key in self.totals:
            self.totals[key] += getattr(unit, key)
