"""The rows the job's parts hand each other, typed: one name and one type per domain concept,
shared by health, report, progress and metrics. Pure: standard library only (no Spark, no
Redis), so executors, the driver and anything that reads a run's summary can import them.

- ``HealthRow`` (with ``ConsumerHealth``): one (stream, group)'s group health as found before
  a run (``recovery.driver.health``); a HEALTH row (``recovery.schemas``) as ``as_dict()``.
- ``HistogramRow``: one (stream, group)'s PEL histogram (``recovery.executor.histogram``); a
  PEL_HISTOGRAM row, and what a tally carries, as ``as_dict()``.
- ``UnitCounts``: one (stream, group)'s report rows by action (``recovery.executor.tally``);
  a row of the summary's ``units`` and of the log table.
- ``DeadLetterWarning``: a dead-letter stream over a ``dead_letters.warn_*`` threshold
  (``recovery.targets.dead_letter_streams``).
- ``Skipped``: a key or group a job leaves alone, and why (every job's summary).
- ``FailedErrors``: a run's failed entries of one reason and error signature
  (``recovery.report.signatures``); ``AckedDeletions`` (with ``AckedUnit``): what
  ``reprocess.delete_acked`` did (``recovery.executor.tally``).
- ``DeadLetterStreamRead`` and ``DeadLetterSignature``: a dead-letter read's row per
  dead-letter stream and per error signature (``recovery.dead_letters.run``).
- ``RedriveUnit``: what a redrive did with one dead-letter stream (``recovery.redrive.run``).
- ``AfterRun``: the state of a run's streams and groups right after it
  (``recovery.report.after_run``), for the summary and the metrics.

Each row reads like the mapping it is written as (``row["stream"]``, ``row.get("lag")``), so
scripts that read a summary's rows by key keep working; ``as_dict()`` is the mapping written
out (the JSON summary, the Parquet files), key for key what the job has always written.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

Counts = tuple[tuple[str, int], ...]  # (bucket label, entries) pairs, in the order counted


class Row:
    """Read access by name, as a mapping's, for the frozen dataclass rows of this module."""

    __slots__ = ()

    def as_dict(self) -> dict[str, Any]:
        """The row as the mapping it is written as: each field by name."""
        return {f.name: getattr(self, f.name) for f in fields(self)}  # type: ignore[arg-type]

    def __getitem__(self, name: str) -> Any:
        mapping = self.as_dict()
        if name not in mapping:
            raise KeyError(name)
        return mapping[name]

    def get(self, name: str, default: Any = None) -> Any:
        """The value named `name`, else `default` (as ``dict.get``)."""
        return self.as_dict().get(name, default)


def unit_key(row: HealthRow | HistogramRow | UnitCounts) -> tuple[str, str]:
    """A row's (stream, group)."""
    return row.stream, row.group


def pairs(value: Mapping[str, int] | Iterable[Iterable[Any]] | None) -> Counts:
    """Bucket counts as (label, entries) pairs, from a mapping or from pairs (a JSON list of
    two-element lists, a Spark map read as a dict); () for None."""
    items = value.items() if isinstance(value, Mapping) else (tuple(p) for p in value or ())
    return tuple((str(label), int(n)) for label, n in items)


@dataclass(frozen=True)
class ConsumerHealth(Row):
    """One consumer of a group as XINFO CONSUMERS showed it: its pending entries, idle ms and
    inactive ms (None before Redis 7.2)."""

    name: str
    pending: int
    idle_ms: int
    inactive_ms: int | None = None


@dataclass(frozen=True)
class HistogramRow(Row):
    """One (stream, group)'s PEL histogram: entries by delivery-count bucket and by idle-age
    bucket, the largest idle time read (ms; None: no row read), and, for a part of a unit
    split over several tasks, the IDs its hand-over gave to other consumers (``given``)."""

    stream: str
    group: str
    deliveries: Counts = ()
    idle_ages: Counts = ()
    oldest_idle_ms: int | None = None
    given: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        """A PEL_HISTOGRAM row (bucket counts as (label, entries) pairs), with ``given``
        only where the part gave IDs away."""
        row: dict[str, Any] = {"stream": self.stream, "group": self.group,
                               "deliveries": list(self.deliveries),
                               "idle_ages": list(self.idle_ages),
                               "oldest_idle_ms": self.oldest_idle_ms}
        if self.given:
            row["given"] = list(self.given)
        return row

    @classmethod
    def from_mapping(cls, row: Mapping[str, Any]) -> HistogramRow:
        """A row from its mapping (``as_dict``'s, read back from JSON or from Spark)."""
        return cls(row["stream"], row["group"], pairs(row.get("deliveries")),
                   pairs(row.get("idle_ages")), row.get("oldest_idle_ms"),
                   tuple(row.get("given") or ()))


@dataclass(frozen=True)
class HealthRow(Row):
    """One (stream, group)'s health as found before a run: the stream's length, the group's
    lag (None where the server cannot tell) and pending entries, its consumers, the length
    of its dead-letter stream (None: not read) and the keys held behind dead-lettered heads
    (None: heads do not hold keys); then its PEL histogram (empty until merged in)."""

    stream: str
    group: str
    length: int
    lag: int | None
    pending: int
    consumers: tuple[ConsumerHealth, ...] = ()
    dead_letter_length: int | None = None
    held_keys: int | None = None
    oldest_idle_ms: int | None = None
    deliveries: Counts = ()
    idle_ages: Counts = ()

    def as_dict(self) -> dict[str, Any]:
        """A HEALTH row: consumers as their mappings, bucket counts as label -> entries."""
        row = super().as_dict()
        row["consumers"] = [c.as_dict() for c in self.consumers]
        row["deliveries"], row["idle_ages"] = dict(self.deliveries), dict(self.idle_ages)
        return row

    def with_histogram(self, histogram: HistogramRow | None) -> HealthRow:
        """This row with `histogram`'s counts (None: empty ones)."""
        if histogram is None:
            return replace(self, oldest_idle_ms=None, deliveries=(), idle_ages=())
        return replace(self, oldest_idle_ms=histogram.oldest_idle_ms,
                       deliveries=histogram.deliveries, idle_ages=histogram.idle_ages)


@dataclass(frozen=True)
class UnitCounts(Row):
    """One (stream, group)'s report rows by action (`counts`, every action of the run's
    columns, in their order) and their `total`; under a backoff schedule also its entries
    not due (`not_due`; None: no schedule) and when the first becomes due (epoch ms); once
    read, its pending entries right after the run."""

    stream: str
    group: str
    counts: Mapping[str, int] = field(default_factory=dict)
    total: int = 0
    not_due: int | None = None
    next_due_ms: int | None = None
    pending_after: int | None = None  # its PEL's entries right after the run (None: unknown)
    after_read: bool = False  # whether the state after the run was read (a real run)

    def as_dict(self) -> dict[str, Any]:
        """The summary's unit row: ``stream``, ``group``, one key per action, ``total``;
        ``not_due`` and ``next_due_ms`` under a backoff schedule; ``pending_after`` once the
        state after the run was read."""
        row: dict[str, Any] = {"stream": self.stream, "group": self.group, **self.counts,
                               "total": self.total}
        if self.not_due is not None:
            row["not_due"], row["next_due_ms"] = self.not_due, self.next_due_ms
        if self.after_read:
            row["pending_after"] = self.pending_after
        return row

    def entries(self, action: str) -> int:
        """The unit's report rows of `action` (0 for none)."""
        return self.counts.get(action, 0)


@dataclass(frozen=True)
class DeadLetterWarning(Row):
    """A dead-letter stream (`dead_letter_stream`, of source `stream`) that reaches a
    threshold: `warning` ``length`` (entries) or ``oldest_age_s`` (seconds), its `value` and
    the `threshold` it reaches."""

    stream: str
    dead_letter_stream: str
    warning: str
    value: float
    threshold: float


@dataclass(frozen=True)
class Skipped(Row):
    """A key or group the run leaves alone (`group` None: the whole key), and why (shown in
    the summary)."""

    stream: str
    group: str | None
    reason: str


@dataclass(frozen=True)
class AfterRun:
    """The state of a run's streams and groups read right after it
    (``recovery.report.after_run``), for the summary and the metrics. `pending`: (stream,
    group) -> entries in its PEL; `dead_letters`: each dead-letter stream's length (0 when
    it does not exist) and `dead_letter_ages`: its oldest dead letter's age in seconds
    (absent when it has none), each listed once under its source stream, or under its own
    name where several sources share it (``dlq_names.labels``); `read_for`: the source
    streams whose dead-letter streams were all read; `job_consumers` and
    `job_consumer_entries`: (stream, group) -> how many of the job's own consumers
    (``<claim.consumer_prefix>-...``, any run's) still hold pending entries, and how many
    entries they hold. A key whose read failed (the stream or group vanished, a permission
    missing) is absent."""

    pending: dict[tuple[str, str], int] = field(default_factory=dict)
    dead_letters: dict[str, int] = field(default_factory=dict)
    dead_letter_ages: dict[str, float] = field(default_factory=dict)
    read_for: frozenset[str] = frozenset()
    job_consumers: dict[tuple[str, str], int] = field(default_factory=dict)
    job_consumer_entries: dict[tuple[str, str], int] = field(default_factory=dict)


@dataclass(frozen=True)
class FailedErrors(Row):
    """A run's failed entries of one `reason` and error `signature` (None: no error text):
    how many (`entries`) and one error text as written (`example`)."""

    reason: str | None
    signature: str | None
    entries: int
    example: str | None


@dataclass(frozen=True)
class AckedUnit(Row):
    """One (stream, group)'s entries whose ack also deleted them from the stream
    (`deleted`), and those acked but kept because another group still references them
    (`kept`)."""

    stream: str
    group: str
    deleted: int = 0
    kept: int = 0


@dataclass(frozen=True)
class AckedDeletions(Row):
    """What ``reprocess.delete_acked`` did over a run: its entries deleted with their ack and
    kept for another group, in all and per unit (sorted; only units with either)."""

    deleted: int
    kept: int
    units: tuple[AckedUnit, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        """``{"deleted", "kept", "units": [{"stream", "group", "deleted", "kept"}, ...]}``."""
        return {"deleted": self.deleted, "kept": self.kept,
                "units": [u.as_dict() for u in self.units]}


@dataclass(frozen=True)
class RedriveUnit(Row):
    """What a redrive did with one source `stream`'s `dead_letter_stream`: the dead letters
    it examined, matched (what a dry run would move) and moved back (`redriven`), and the
    length left in the dead-letter stream (None: not read, the redrive stopped first)."""

    stream: str
    dead_letter_stream: str
    examined: int = 0
    matched: int = 0
    redriven: int = 0
    left_in_dead_letter: int | None = None


@dataclass(frozen=True)
class DeadLetterStreamRead(Row):
    """A dead-letter read's row for one `dead_letter_stream` (of source `stream`, or its own
    name where several `sources` share it): its `status` (``read``, ``empty``,
    ``missing``), XLEN, oldest dead letter's age (s; None when empty) and the dead letters
    read."""

    stream: str
    dead_letter_stream: str
    sources: list[str]
    status: str
    length: int
    oldest_age_s: float | None
    read: int


@dataclass(frozen=True)
class DeadLetterSignature(Row):
    """A dead-letter read's dead letters of one error `signature`: how many, the first and
    last death times (ISO 8601 text in UTC) and one example's dead-letter stream and ID."""

    signature: str | None
    dead_letters: int
    first_death_time: str | None
    last_death_time: str | None
    example_dead_letter_key: str | None
    example_dead_letter_id: str | None
