"""The metrics of the two dead-letter jobs, pushed once at the end of each run
(``recovery.metrics.push``) like the recovery job's: ``jobs/redrive.py`` (kind ``redrive``
or ``redrive_dry_run``: entries examined, matched and redriven, each dead-letter stream's
length and oldest dead letter's age after the redrive) and ``jobs/dead_letters.py``
(kind ``dead_letters``: dead letters read, each dead-letter stream's length and oldest
dead letter's age). Off unless ``metrics.pushgateway_url`` is set."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any, TypeVar

import redis

from recovery.dead_letters.report import DeadLetterSummary
from recovery.metrics.families import RunFacts, final_status
from recovery.metrics.push import push_run
from recovery.redis_io.dlq_names import labels
from recovery.redis_io.redis_conn import connect
from recovery.redrive.run import RedriveSummary
from recovery.report.after_run import AfterRun, read_after_run
from recovery.settings.model import Settings, redis_params

log = logging.getLogger(__name__)


def push_redrive_metrics(settings: Settings, summary: RedriveSummary | None, exit_code: int,
                         started_s: float) -> dict[str, Any] | None:
    """Push a redrive's metrics; the outcome goes into the summary's ``metrics`` (also
    returned; None when metrics are off). Never raises."""

    def facts_of(summary: RedriveSummary) -> RunFacts:
        pairs = [(u["stream"], u["dead_letter_stream"]) for u in summary.units
                 if u.get("left_in_dead_letter") is not None]
        label = labels(pairs)
        left = {label[u["dead_letter_stream"]]: int(u["left_in_dead_letter"])
                for u in summary.units if u.get("left_in_dead_letter") is not None}
        ages = dead_letter_ages(settings, pairs)
        return RunFacts(final_status(summary.status, exit_code), exit_code, started_s,
                        time.time() - started_s, totals=summary.totals,
                        skipped=len(summary.skipped), after=AfterRun(dead_letters=left),
                        dead_letter_ages=ages, worked_on=len(summary.units))

    kind = "redrive_dry_run" if summary is not None and summary.dry_run else "redrive"
    return _push(settings, kind, summary, facts_of, exit_code, started_s)


def push_dead_letters_metrics(settings: Settings, summary: DeadLetterSummary | None,
                              exit_code: int, started_s: float) -> dict[str, Any] | None:
    """Push a dead-letter read's metrics; the outcome goes into the summary's ``metrics``
    (also returned; None when metrics are off). Never raises."""

    def facts_of(summary: DeadLetterSummary) -> RunFacts:
        trimmed = {r["dead_letter_stream"]: int(r["trimmed"])
                   for r in (summary.retention or {}).get("streams", [])}
        lengths = {s["stream"]: int(s["length"]) - trimmed.get(s["dead_letter_stream"], 0)
                   for s in summary.streams if s.get("length") is not None}
        ages = {s["stream"]: float(s["oldest_age_s"]) for s in summary.streams
                if s.get("oldest_age_s") is not None}
        return RunFacts(final_status(summary.status, exit_code), exit_code, started_s,
                        time.time() - started_s,
                        totals={"read": summary.totals["dead_letters"]},
                        skipped=len(summary.skipped), after=AfterRun(dead_letters=lengths),
                        dead_letter_ages=ages, worked_on=len(summary.streams))

    kind = "dead_letters_dry_run" if summary is not None and summary.dry_run else "dead_letters"
    return _push(settings, kind, summary, facts_of, exit_code, started_s)


def dead_letter_ages(settings: Settings, pairs: list[tuple[str, str]]) -> dict[str, float]:
    """Each dead-letter stream of `pairs` (source stream, dead-letter stream) -> its oldest
    dead letter's age (s) now, under its label (``dlq_names.labels``), over a client of its
    own (absent for an empty one); nothing is read for no pairs, nothing is known when Redis
    cannot be read (the rest is pushed all the same)."""
    if not pairs:
        return {}
    try:
        client = connect(redis_params(settings))
        with contextlib.closing(client):
            return read_after_run(client, [], settings.dead_letter.names,
                                  pairs=pairs).dead_letter_ages
    except redis.RedisError as exc:
        log.info("metrics: the dead letters' ages could not be read (%s)", type(exc).__name__)
        return {}


S = TypeVar("S", RedriveSummary, DeadLetterSummary)


def _push(settings: Settings, kind: str, summary: S | None, facts_of: Callable[[S], RunFacts],
          exit_code: int, started_s: float) -> dict[str, Any] | None:
    """Push one job's metrics of `kind` (facts from its summary; a run without one pushes
    status failed), and put the outcome in the summary's ``metrics``. None when off."""
    if settings.metrics.pushgateway_url is None:
        return None

    def facts() -> RunFacts:
        if summary is None:
            return RunFacts("failed", exit_code, started_s, time.time() - started_s)
        return facts_of(summary)

    entry = push_run(settings.metrics, kind, facts, exit_code)
    if summary is not None:
        summary.metrics = entry
    return entry
