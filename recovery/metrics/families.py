"""What a run's metrics are: Prometheus gauges built from what the run knows, in a registry
of their own (pure: no I/O). Names follow Prometheus conventions: base units (seconds,
entries), no ``_total`` (each value is this run's or the state now, pushed as a gauge, not
a counter), labels from a bounded set (stream, group, action, status; never an entry ID).

Series stay bounded however many streams a run works on: the `max_units` (stream, group)
units with the most pending entries get series of their own, the others are summed into
one unit labelled ``stream="(other)", group="(other)"`` (their oldest idle time: the
largest; the other values summed), and ``redis_stream_recovery_run_units_aggregated``
says how many that is."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry, Gauge

from recovery.rows import AfterRun, HealthRow, UnitCounts, unit_key

PREFIX = "redis_stream_recovery_"
OTHER = "(other)"  # the stream and group label of the aggregate unit
STATUSES = ("ok", "partial", "empty", "failed")
UNIT_LABELS = ("stream", "group")
LAST_SUCCESS = PREFIX + "last_success_timestamp_seconds"


@dataclass(frozen=True)
class RunFacts:
    """What one run knows when it ends. `totals`: entries by action, this run; `units`:
    the summary's per (stream, group) rows (``stream``, ``group``, an entry count per
    action); `health`: the group health rows as found before the run (``pending``, ``lag``,
    ``oldest_idle_ms``, ``deliveries``: PEL entries by delivery-count bucket,
    ``dead_letter_length``); `after`: the state read right after it."""

    status: str
    exit_code: int
    started_s: float  # epoch seconds
    duration_s: float
    totals: Mapping[str, int] = field(default_factory=dict)
    not_due: int = 0
    skipped: int = 0
    units: list[UnitCounts] = field(default_factory=list)
    health: list[HealthRow] = field(default_factory=list)
    after: AfterRun = field(default_factory=AfterRun)
    worked_on: int | None = None  # what the job worked on, if not (stream, group) units
    selected: int | None = None  # (stream, group) units selected, if not those worked on
    held_keys: int = 0  # per-key order (order.key_field): keys this run held
    oldest_held_age_s: float = 0.0  # ...and the age of the oldest entry one waits behind
    uncertain: int = 0  # entries reported skipped as uncertain (a lost reply's call re-sent)


@dataclass
class UnitSeries:
    """One (stream, group)'s values: pending after the run, lag, oldest idle time (0 for a
    group with nothing pending) and PEL entries by delivery-count bucket as found before it
    (None: unknown), entries by action this run, and the job's own consumers still holding
    entries after it and how many they hold (None: not read)."""

    stream: str
    group: str
    pending: int | None = None
    lag: int | None = None
    oldest_idle_ms: int | None = None
    entries: dict[str, int] = field(default_factory=dict)
    deliveries: dict[str, int] = field(default_factory=dict)
    job_consumers: int | None = None
    job_consumer_entries: int | None = None


def run_registry(facts: RunFacts, max_units: int) -> CollectorRegistry:
    """The run's gauges (the run group's push: replaces everything the previous run of the
    same grouping key pushed, so a unit that is gone leaves no stale series)."""
    registry = CollectorRegistry()
    gauge(registry, "run_status", "1 for this run's status (ok, partial, empty: nothing "
          "selected, failed), 0 for the others", ("status",),
          (((s,), int(s == facts.status)) for s in STATUSES))
    gauge(registry, "run_exit_code", "The job's exit code: 0 ok, 2 bad config, 1 other",
          (), [((), facts.exit_code)])
    gauge(registry, "run_duration_seconds", "Wall time of the run, from the job's start to "
          "the push", (), [((), facts.duration_s)])
    gauge(registry, "run_start_timestamp_seconds", "When the run started (Unix time)", (),
          [((), facts.started_s)])
    gauge(registry, "run_entries", "Entries by action this run, all streams", ("action",),
          (((str(action),), n) for action, n in facts.totals.items()))
    gauge(registry, "run_not_due_entries", "Entries left pending this run, not due yet "
          "under the backoff schedule", (), [((), facts.not_due)])
    gauge(registry, "run_held_keys", "Keys whose entries this run held pending behind an "
          "older entry of the key (per-key order, order.key_field; 0 without)", (),
          [((), facts.held_keys)])
    gauge(registry, "run_oldest_held_age_seconds", "Age (by its ID's time) of the oldest entry "
          "a key held this run waits behind (per-key order; 0 without)", (),
          [((), facts.oldest_held_age_s)])
    gauge(registry, "run_uncertain_entries", "Entries this run reported skipped as uncertain: "
          "a call sent again after its reply was lost, moved or acked elsewhere, unknown "
          "(also in run_entries{action=\"skipped\"})", (), [((), facts.uncertain)])
    gauge(registry, "run_skipped_units", "Streams and groups the run skipped (missing, "
          "wrong type, refused)", (), [((), facts.skipped)])
    units = unit_series(facts)
    listed, aggregated = top_units(units, max_units)
    worked_on = len(units) if facts.worked_on is None else facts.worked_on
    gauge(registry, "run_units", "Streams and groups the run worked on (a redrive or a "
          "dead-letter read: streams)", (), [((), worked_on)])
    gauge(registry, "selected_units", "Streams and groups the selection matched, pending or "
          "not (0: nothing selected, status empty; a redrive or a dead-letter read: streams)",
          (), [((), worked_on if facts.selected is None else facts.selected)])
    gauge(registry, "run_units_aggregated", f"Of the streams and groups, how many are summed "
          f"into the stream=\"{OTHER}\" series (metrics.max_units)", (), [((), aggregated)])
    add_unit_gauges(registry, listed, facts)
    add_dead_letter_gauges(registry, facts, max_units)
    return registry


def final_status(status: str | None, exit_code: int) -> str:
    """A job's status for ``run_status``: its summary's (None: it had none), ``failed``
    whenever the exit code is not 0."""
    return status if exit_code == 0 and status in STATUSES else "failed"


def success_registry(at_s: float) -> CollectorRegistry:
    """The success group's one gauge, pushed only by a run that succeeded (exit 0)."""
    registry = CollectorRegistry()
    gauge(registry, "last_success_timestamp_seconds", "When a run last succeeded (Unix "
          "time, exit code 0)", (), [((), at_s)])
    return registry


def attempt_registry(at_s: float, exit_code: int, redis_up: int | None) -> CollectorRegistry:
    """The attempt group's gauges, pushed by every run, whatever happened (POST: a gauge not
    given here keeps its last value): when it ended, its exit code and, when known, whether
    it could read Redis (1) or not (0: unreachable or login refused)."""
    registry = CollectorRegistry()
    gauge(registry, "last_attempt_timestamp_seconds", "When a run last ended, whatever its "
          "outcome (Unix time)", (), [((), at_s)])
    gauge(registry, "last_attempt_exit_code", "The last run's exit code, whatever it did: 0 "
          "ok, 2 refused (bad config or arguments), 1 other", (), [((), exit_code)])
    if redis_up is not None:
        gauge(registry, "redis_up", "1: the last run that got as far as Redis could read it; "
              "0: it could not (unreachable, login refused)", (), [((), redis_up)])
    return registry


def add_unit_gauges(registry: CollectorRegistry, units: list[UnitSeries],
                    facts: RunFacts) -> None:
    """The per (stream, group) gauges of `units`."""
    gauge(registry, "pending_entries", "Entries in the group's PEL, read right after the run",
          UNIT_LABELS, (((u.stream, u.group), u.pending) for u in units
                        if u.pending is not None))
    gauge(registry, "oldest_idle_seconds", "Idle time of the group's oldest pending entry as "
          "the run found it, before it claimed", UNIT_LABELS,
          (((u.stream, u.group), u.oldest_idle_ms / 1000) for u in units
           if u.oldest_idle_ms is not None))
    gauge(registry, "lag_entries", "Entries not yet delivered to the group, as found before "
          "the run (absent where the server cannot tell)", UNIT_LABELS,
          (((u.stream, u.group), u.lag) for u in units if u.lag is not None))
    gauge(registry, "group_entries", "Entries by action this run, per stream and group",
          (*UNIT_LABELS, "action"), (((u.stream, u.group, str(action)), u.entries.get(action, 0))
                                     for u in units for action in facts.totals))
    gauge(registry, "pel_delivery_entries", "Entries in the group's PEL by delivery count "
          "(bucket: 1, 2, 3, 4-5, 6-10, 11-100, >100), as the run read the PEL "
          "(report.pel_histograms)", (*UNIT_LABELS, "bucket"),
          (((u.stream, u.group, bucket), n) for u in units
           for bucket, n in u.deliveries.items()))
    gauge(registry, "job_consumers", "The job's own consumers (claim.consumer_prefix, any "
          "run's) still holding pending entries in the group right after the run",
          UNIT_LABELS, (((u.stream, u.group), u.job_consumers) for u in units
                        if u.job_consumers is not None))
    gauge(registry, "job_consumer_pending_entries", "Entries the job's own consumers still "
          "hold in the group right after the run", UNIT_LABELS,
          (((u.stream, u.group), u.job_consumer_entries) for u in units
           if u.job_consumer_entries is not None))


def add_dead_letter_gauges(registry: CollectorRegistry, facts: RunFacts,
                           max_units: int) -> None:
    """Per dead-letter stream (named by its source stream): its length and its oldest dead
    letter's age where known; the `max_units` longest, the others summed (ages: the
    oldest) into ``stream="(other)"``."""
    lengths = dead_letter_lengths(facts)
    ranked = sorted(lengths, key=lambda s: (-lengths[s], s))
    listed, rest = ranked[:max_units], ranked[max_units:]
    ages = facts.after.dead_letter_ages
    rest_ages = [ages[s] for s in rest if s in ages]
    gauge(registry, "dead_letter_entries", "Length of the stream's dead-letter stream, read "
          "right after the run", ("stream",),
          [*(((s,), lengths[s]) for s in listed),
           *([((OTHER,), sum(lengths[s] for s in rest))] if rest else [])])
    gauge(registry, "dead_letter_oldest_age_seconds", "Age of the stream's oldest dead "
          "letter (absent when it has none), read at the end of the run", ("stream",),
          [*(((s,), ages[s]) for s in listed if s in ages),
           *([((OTHER,), max(rest_ages))] if rest_ages else [])])


def dead_letter_lengths(facts: RunFacts) -> dict[str, int]:
    """Stream -> its dead-letter stream's length: after the run where read (a shared one
    once, under its own name: ``AfterRun``), else as the health found it before."""
    before = {h.stream: h.dead_letter_length for h in facts.health
              if h.dead_letter_length is not None and h.stream not in facts.after.read_for}
    return {**before, **facts.after.dead_letters}


def unit_series(facts: RunFacts) -> list[UnitSeries]:
    """Every (stream, group) of the health or the summary's units, with its values."""
    series: dict[tuple[str, str], UnitSeries] = {}
    for h in facts.health:
        idle = h.oldest_idle_ms
        series[unit_key(h)] = UnitSeries(
            h.stream, h.group, lag=h.lag,
            oldest_idle_ms=0 if idle is None and h.pending == 0 else idle,
            deliveries=dict(h.deliveries))
    for row in facts.units:
        unit = series.setdefault(unit_key(row), UnitSeries(row.stream, row.group))
        unit.entries = {a: row.entries(a) for a in facts.totals}
    for key, unit in series.items():
        unit.pending = facts.after.pending.get(key)
        unit.job_consumers = facts.after.job_consumers.get(key)
        unit.job_consumer_entries = facts.after.job_consumer_entries.get(key)
    return [series[key] for key in sorted(series)]


def top_units(units: list[UnitSeries], limit: int) -> tuple[list[UnitSeries], int]:
    """The `limit` units with the most pending entries (then the oldest idle), and, when
    there are more, one more: the others summed (``OTHER``). Also returns how many were
    summed."""
    if len(units) <= limit:
        return units, 0
    ranked = sorted(units, key=lambda u: (u.pending or 0, u.oldest_idle_ms or 0), reverse=True)
    rest = ranked[limit:]
    other = UnitSeries(OTHER, OTHER)
    other.pending = sum_known(u.pending for u in rest)
    other.lag = sum_known(u.lag for u in rest)
    other.job_consumers = sum_known(u.job_consumers for u in rest)
    other.job_consumer_entries = sum_known(u.job_consumer_entries for u in rest)
    idle = [u.oldest_idle_ms for u in rest if u.oldest_idle_ms is not None]
    other.oldest_idle_ms = max(idle) if idle else None
    for unit in rest:
        add_counts(other.entries, unit.entries)
        add_counts(other.deliveries, unit.deliveries)
    return [*ranked[:limit], other], len(rest)


def sum_known(values: Iterable[int | None]) -> int | None:
    """The sum of the values that are known; None when none is."""
    known = [v for v in values if v is not None]
    return sum(known) if known else None


def add_counts(total: dict[str, int], counts: Mapping[str, int]) -> None:
    """Add `counts` (label -> count) into `total`."""
    for label, n in counts.items():
        total[label] = total.get(label, 0) + n


def gauge(registry: CollectorRegistry, name: str, help_text: str, labels: tuple[str, ...],
          values: Iterable[tuple[Any, Any]]) -> None:
    """Register ``PREFIX + name`` in `registry` with one sample per (label values, value)."""
    metric = Gauge(PREFIX + name, help_text, labels, registry=registry)
    for label_values, value in values:
        (metric.labels(*label_values) if labels else metric).set(value)
