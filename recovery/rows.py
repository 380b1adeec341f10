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
- ``TrimRow``: what retention did with one dead-letter stream
  (``recovery.dead_letters.retention``).
- ``RedriveUnit``: what a redrive did with one dead-letter stream (``recovery.redrive.run``).
- ``AfterRun``: the state of a run's streams and groups right after it
  (``recovery.report.after_run``), for the summary and the metrics.

Each row is also the read-only mapping it is written as (``as_dict()``: the JSON summary's,
the Parquet files', key for key what the job has always written), so scripts that read a
summary's rows as dicts keep working (``row["stream"]``, ``dict(row)``, pandas).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

Counts = tuple[tuple[str, int], ...]  # (bucket label, entries) pairs, in the order counted


class Row(Mapping[str, Any]):
    """A typed row that is also the read-only mapping it is written as (``as_dict``): read by
    key, compared with a dict, turned into one (``dict(row)``, pandas) as the dict rows it
    replaces were. The rows below are frozen dataclasses (``eq=False``: equal as mappings)."""

    __slots__ = ()

    def as_dict(self) -> dict[str, Any]:
        """The row as the mapping it is written as: each field by name."""
        return {f.name: getattr(self, f.name) for f in fields(self)}  # type: ignore[arg-type]

    def __getitem__(self, name: str) -> Any:
        return self.as_dict()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self.as_dict())

    def __len__(self) -> int:
        return len(self.as_dict())


def unit_key(row: HealthRow | HistogramRow | UnitCounts) -> tuple[str, str]:
    """A row's (stream, group)."""
    return row.stream, row.group


def pairs(value: Mapping[str, int] | Iterable[Iterable[Any]] | None) -> Counts:
    """Bucket counts as (label, entries) pairs, from a mapping or from pairs (a JSON list of
    two-element lists, a Spark map read as a dict); () for None."""
    items = value.items() if isinstance(value, Mapping) else (tuple(p) for p in value or ())
    return tuple((str(label), int(n)) for label, n in items)


@dataclass(frozen=True, eq=False)
class ConsumerHealth(Row):
    """One consumer of a group as XINFO CONSUMERS showed it: its pending entries, idle ms and
    inactive ms (None before Redis 7.2)."""

    name: str
    pending: int
    idle_ms: int
    inactive_ms: int | None = None


@dataclass(frozen=True, eq=False)
class HistogramRow(Row):
    """One (stream, group)'s PEL histogram: entries by delivery-count bucket and by idle-age
    bucket, the largest idle time read (ms; None: no row read), and, for a part of a unit
    split over several tasks, the IDs its hand-over claimed and kept pending (``kept``)."""

    stream: str
    group: str
    deliveries: Counts = ()
    idle_ages: Counts = ()
    oldest_idle_ms: int | None = None
    kept: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        """A PEL_HISTOGRAM row (bucket counts as (label, entries) pairs), with ``kept``
        only where the part kept IDs pending."""
        row: dict[str, Any] = {"stream": self.stream, "group": self.group,
                               "deliveries": list(self.deliveries),
                               "idle_ages": list(self.idle_ages),
                               "oldest_idle_ms": self.oldest_idle_ms}
        if self.kept:
            row["kept"] = list(self.kept)
        return row

    @classmethod
    def from_mapping(cls, row: Mapping[str, Any]) -> HistogramRow:
        """A row from its mapping (``as_dict``'s, read back from JSON or from Spark)."""
        return cls(row["stream"], row["group"], pairs(row.get("deliveries")),
                   pairs(row.get("idle_ages")), row.get("oldest_idle_ms"),
                   tuple(row.get("kept") or ()))


@dataclass(frozen=True, eq=False)
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


class UnitCounts(Row):
    """One (stream, group)'s report rows by action (`counts`, every action of the run's
    columns, in their order) and their `total`; under a backoff schedule also its entries
    not due (`not_due`; None: no schedule) and when the first becomes due (epoch ms); once
    read (`after_read`), its pending entries right after the run (`pending_after`; None:
    unknown).

    Not a dataclass, unlike the other rows: its mapping is flat (an action's count under the
    action's name), and pandas would read a dataclass by its fields (``counts`` nested)."""

    __slots__ = ("after_read", "counts", "group", "next_due_ms", "not_due", "pending_after",
                 "stream", "total")

    def __init__(self, stream: str, group: str, counts: Mapping[str, int] | None = None,
                 total: int = 0, not_due: int | None = None, next_due_ms: int | None = None,
                 pending_after: int | None = None, after_read: bool = False) -> None:
        self.stream, self.group, self.total = stream, group, total
        self.counts: Mapping[str, int] = dict(counts or {})
        self.not_due, self.next_due_ms = not_due, next_due_ms
        self.pending_after, self.after_read = pending_after, after_read

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

    def with_not_due(self, not_due: int, next_due_ms: int | None) -> UnitCounts:
        """This row with its entries not due under a backoff schedule."""
        return UnitCounts(self.stream, self.group, self.counts, self.total, not_due,
                          next_due_ms, self.pending_after, self.after_read)

    def with_pending_after(self, pending_after: int | None) -> UnitCounts:
        """This row with its pending entries as read right after the run."""
        return UnitCounts(self.stream, self.group, self.counts, self.total, self.not_due,
                          self.next_due_ms, pending_after, True)

    def __repr__(self) -> str:
        return f"UnitCounts({self.as_dict()!r})"


@dataclass(frozen=True, eq=False)
class DeadLetterWarning(Row):
    """A dead-letter stream (`dead_letter_stream`, of source `stream`) that reaches a
    threshold: `warning` ``length`` (entries) or ``oldest_age_s`` (seconds), its `value` and
    the `threshold` it reaches."""

    stream: str
    dead_letter_stream: str
    warning: str
    value: float
    threshold: float


@dataclass(frozen=True, eq=False)
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


@dataclass(frozen=True, eq=False)
class FailedErrors(Row):
    """A run's failed entries of one `reason` and error `signature` (None: no error text):
    how many (`entries`) and one error text as written (`example`)."""

    reason: str | None
    signature: str | None
    entries: int
    example: str | None


@dataclass(frozen=True, eq=False)
class AckedUnit(Row):
    """One (stream, group)'s entries whose ack also deleted them from the stream
    (`deleted`), and those acked but kept because another group still references them
    (`kept`)."""

    stream: str
    group: str
    deleted: int = 0
    kept: int = 0


@dataclass(frozen=True, eq=False)
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


@dataclass(frozen=True, eq=False)
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


@dataclass(frozen=True, eq=False)
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


@dataclass(frozen=True, eq=False)
class DeadLetterSignature(Row):
    """A dead-letter read's dead letters of one error `signature`: how many, the first and
    last death times (ISO 8601 text in UTC) and one example's dead-letter stream and ID."""

    signature: str | None
    dead_letters: int
    first_death_time: str | None
    last_death_time: str | None
    example_dead_letter_key: str | None
    example_dead_letter_id: str | None


@dataclass(frozen=True, eq=False)
class TrimRow(Row):
    """What retention did with one `dead_letter_stream` (of `stream`): letters removed
    (`trimmed`; 0 in a dry run) and those that go (`would_trim`), the newest removed
    (`last_trimmed_id`), the ID every entry below is gone (`kept_from_id`: the limits' cut
    or where retention stopped; None: no cut), the limits that set the cut (`by`), whether
    ``dead_letters.retention_floor_s`` held it back, and where and why retention stopped
    short of it (`stopped_at_id`, `stopped_because`: ``not-a-letter``,
    ``source-not-selected``, ``group-not-selected``; `stopped_source`: the source, or group,
    of the letter it stopped at; None when it reached the cut)."""

    stream: str
    dead_letter_stream: str
    trimmed: int = 0
    would_trim: int = 0
    last_trimmed_id: str | None = None
    kept_from_id: str | None = None
    by: list[str] = field(default_factory=list)
    held_by_floor: bool = False
    stopped_at_id: str | None = None
    stopped_because: str | None = None
    stopped_source: str | None = None
