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

from recovery.dead_letters.report import DeadLetterSummary
from recovery.metrics.families import RunFacts, final_status
from recovery.metrics.push import push_run, within_deadline
from recovery.redis_io.redis_conn import connect
from recovery.redrive.run import RedriveSummary
from recovery.report.after_run import read_after_run
from recovery.rows import AfterRun
from recovery.settings.model import Settings, redis_params

log = logging.getLogger(__name__)


def push_redrive_metrics(settings: Settings, summary: RedriveSummary | None, exit_code: int,
                         started_s: float, redis_up: int | None = None
                         ) -> dict[str, Any] | None:
    """Push a redrive's metrics; the outcome goes into the summary's ``metrics`` (also
    returned; None when metrics are off). `redis_up` 0: the redrive could not reach Redis
    (or log in): like a run without a summary, it pushes only its attempt. Never raises."""

    def facts_of(summary: RedriveSummary) -> RunFacts:
        pairs = [(u.stream, u.dead_letter_stream) for u in summary.units
                 if u.left_in_dead_letter is not None]
        return RunFacts(final_status(summary.status, exit_code), exit_code, started_s,
                        time.time() - started_s, totals=summary.totals,
                        skipped=len(summary.skipped), after=dead_letters_after(settings, pairs),
                        worked_on=len(summary.units))

    # the kind from the settings: a dry run refused before its summary is still a dry run
    kind = "redrive_dry_run" if settings.redrive.dry_run else "redrive"
    return _push(settings, kind, summary, facts_of, exit_code, started_s, redis_up)


def push_dead_letters_metrics(settings: Settings, summary: DeadLetterSummary | None,
                              exit_code: int, started_s: float, redis_up: int | None = None
                              ) -> dict[str, Any] | None:
    """Push a dead-letter read's metrics; the outcome goes into the summary's ``metrics``
    (also returned; None when metrics are off). `redis_up` as for a redrive. Never
    raises."""

    def facts_of(summary: DeadLetterSummary) -> RunFacts:
        return RunFacts(final_status(summary.status, exit_code), exit_code, started_s,
                        time.time() - started_s,
                        totals={"read": summary.totals["dead_letters"]},
                        skipped=len(summary.skipped), after=_read_state(settings, summary),
                        worked_on=len(summary.streams))

    kind = "dead_letters_dry_run" if settings.dead_letters.dry_run else "dead_letters"
    return _push(settings, kind, summary, facts_of, exit_code, started_s, redis_up)


def _read_state(settings: Settings, summary: DeadLetterSummary) -> AfterRun:
    """The dead-letter read's streams as they are at its end: as it found them, unless its
    retention trimmed some (then read again, :func:`dead_letters_after`)."""
    if summary.retention and summary.retention["trimmed"]:
        return dead_letters_after(settings, [(source, s.dead_letter_stream)
                                             for s in summary.streams
                                             for source in s.sources or [s.stream]])
    return AfterRun(
        dead_letters={s.stream: s.length for s in summary.streams},
        dead_letter_ages={s.stream: s.oldest_age_s for s in summary.streams
                          if s.oldest_age_s is not None})


def dead_letters_after(settings: Settings, pairs: list[tuple[str, str]]) -> AfterRun:
    """Each dead-letter stream of `pairs` (source stream, dead-letter stream) now: its
    length and oldest dead letter's age (s), under its label (``dlq_names.labels``), read
    over a client of its own (``read_after_run``); empty for no pairs, or when Redis cannot
    be read (the rest is pushed all the same)."""
    if not pairs:
        return AfterRun()

    def read() -> None:
        client = connect(redis_params(settings))
        with contextlib.closing(client):
            found.append(read_after_run(client, [], settings.dead_letter.names, pairs=pairs))

    found: list[AfterRun] = []
    try:  # Redis may hang or be gone: within metrics.timeout_s, and never fatal to the push
        within_deadline(read, settings.metrics.timeout_s)
        return found[0]
    except Exception as exc:  # a RecoveryError from connect, a redis error, the timeout
        log.info("metrics: the dead-letter streams could not be read (%s)", type(exc).__name__)
        return AfterRun()


S = TypeVar("S", RedriveSummary, DeadLetterSummary)


def _push(settings: Settings, kind: str, summary: S | None, facts_of: Callable[[S], RunFacts],
          exit_code: int, started_s: float, redis_up: int | None = None
          ) -> dict[str, Any] | None:
    """Push one job's metrics of `kind` (facts from its summary; a run without one, or one
    that could not reach Redis, `redis_up` 0, pushes its attempt only), and put the outcome
    in the summary's ``metrics``. None when off."""
    if settings.metrics.pushgateway_url is None:
        return None

    def facts() -> RunFacts:
        assert summary is not None
        return facts_of(summary)

    # A run without a summary never read its streams: it pushes only its attempt and keeps
    # the last per-stream series (recovery.metrics.push).
    read = summary is not None and redis_up != 0
    entry = push_run(settings.metrics, kind, facts if read else None, exit_code,
                     redis_up if redis_up is not None else 1 if read else None)
    if summary is not None:
        summary.metrics = entry
    return entry
