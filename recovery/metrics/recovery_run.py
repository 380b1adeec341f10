"""The recovery job's metrics (``jobs/recover.py``): its summary, its group health as found
before the run and the state read right after it, pushed once at the end of the run
(``recovery.metrics.push``), whatever the run's outcome. Off unless
``metrics.pushgateway_url`` is set."""

from __future__ import annotations

import contextlib
import logging
import time
from typing import Any

from recovery.metrics.families import RunFacts, final_status
from recovery.metrics.push import describe, push_run, within_deadline
from recovery.redis_io.redis_conn import connect
from recovery.report.after_run import read_after_run
from recovery.report.summary import RunSummary
from recovery.rows import AfterRun, unit_key
from recovery.settings.model import Settings, redis_params

log = logging.getLogger(__name__)


def push_recovery_metrics(settings: Settings, summary: RunSummary | None, exit_code: int,
                          started_s: float, dry_run: bool = False, plan: bool = False,
                          redis_up: int | None = None) -> dict[str, Any] | None:
    """Push one recovery run's metrics and put the outcome in the summary's ``metrics``
    (also returned); None when metrics are off. `started_s`: the job's start (Unix time).
    The kind (``run_kind``) says which command ran. A run without a summary (refused, or
    Redis unreachable) pushes only its attempt (`redis_up`: 1, 0 or None, unknown) and
    keeps the run group's last per-stream series. Never raises: the run's outcome and exit
    code stand whatever happens here."""
    if settings.metrics.pushgateway_url is None:
        return None
    read: list[str] = []  # where the pending counts come from, once known

    def facts_of() -> RunFacts:
        facts, pending_read = recovery_facts(settings, summary, exit_code, started_s)
        read.append(pending_read)
        return facts

    entry = push_run(settings.metrics, run_kind(dry_run, plan),
                     None if summary is None else facts_of, exit_code,
                     1 if summary is not None else redis_up)
    entry["pending"] = read[0] if read else None
    if summary is not None:
        summary.metrics = entry
    return entry


def run_kind(dry_run: bool, plan: bool) -> str:
    """The grouping key's ``kind`` of a recovery run: ``recover`` for the scheduled command
    (``run``), ``recover_dry_run`` (``dry-run``) and ``recover_apply`` (``apply``, a dry
    run's plan, run by hand), so an ad-hoc command never replaces the scheduled series."""
    return "recover_dry_run" if dry_run else "recover_apply" if plan else "recover"


def recovery_facts(settings: Settings, summary: RunSummary | None, exit_code: int,
                   started_s: float) -> tuple[RunFacts, str]:
    """The run's facts, and where its pending counts come from: ``after the run`` (read
    now), or why they are missing."""
    status = final_status(summary.status if summary is not None else None, exit_code)
    if summary is None:
        return RunFacts(status, exit_code, started_s, time.time() - started_s), "no run"
    units = {*map(unit_key, summary.unit_health), *map(unit_key, summary.units)}
    after, pending_read = summary.after or AfterRun(), "after the run"
    if units and summary.after is None:
        try:  # the run's own read failed: Redis may hang, so within metrics.timeout_s
            read: list[AfterRun] = []
            within_deadline(lambda: read.append(read_state_after(settings, sorted(units))),
                            settings.metrics.timeout_s)
            after = read[0]
        except Exception as exc:  # Redis gone meanwhile: push what is known
            pending_read = f"not read ({describe(exc)})"
            log.info("metrics: the state after the run could not be read: %s", pending_read)
    return RunFacts(status, exit_code, started_s, time.time() - started_s,
                    totals=summary.totals, not_due=summary.not_due,
                    skipped=len(summary.skipped), units=summary.units,
                    health=summary.unit_health, after=after,
                    selected=summary.selected_units,
                    held_keys=summary.held_keys or 0,
                    oldest_held_age_s=summary.oldest_held_age_s or 0.0,
                    uncertain=summary.uncertain), pending_read


def read_state_after(settings: Settings, units: list[tuple[str, str]]) -> AfterRun:
    """``recovery.report.after_run.read_after_run`` over a client of its own."""
    client = connect(redis_params(settings))
    with contextlib.closing(client):
        return read_after_run(client, units, settings.dead_letter.names,
                              settings.claim.consumer_prefix)
