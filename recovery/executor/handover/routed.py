"""Claimed entries on the executor, routed and seen row by row. No I/O
(``recovery.executor.handover.apply`` does the Redis side).

- ``route``: where an entry goes, decided per hand-over batch (the claimed set may have
  crossed Spark packed, so it is not a Spark expression).
- ``RoutedBatch``: one batch of ``recovery.executor.claimed.Claimed`` entries row by row:
  its routes, grouped by unit and route, the handler's messages, and the outcome of each row, which
  become the REPORT batch.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import TypeVar

import pyarrow as pa

from recovery.counts import MAX_CARRIED
from recovery.executor.claimed import Claimed, odd_carried, with_carried
from recovery.handlers import Message
from recovery.params import Unit
from recovery.redis_io.streams import Fields, stream_id_key
from recovery.schemas import (
    CARRIED_DELIVERIES,
    OUTCOME_COLUMNS,
    Action,
    Route,
    report_batch,
)

K = TypeVar("K")
ODD_CARRIED = (f"{CARRIED_DELIVERIES.decode()} holds no count (ASCII digits, at most "
               f"{MAX_CARRIED}): ignored, the PEL's delivery count alone decided")


def route(deleted: bool, count: int | None, max_deliveries: int) -> str:
    """Where a claimed entry goes, the first that holds of: deleted upstream; delivery count
    unknown (gone from the job's PEL); delivery count (after this run's claim) above
    `max_deliveries` (dead letter); else the handler."""
    if deleted:
        return Route.DELETED
    if count is None:
        return Route.GONE
    return Route.DEAD_LETTER if count > max_deliveries else Route.HANDLE


class RoutedBatch:
    """Claimed entries, the route of each row (``route``), and the outcome of each row.

    Rows are indices. ``messages(rows)`` builds the handler's messages of those rows only.
    Every row gets exactly one outcome (``set``); ``report()`` turns the outcomes into a
    REPORT batch.
    """

    def __init__(self, claimed: Claimed, max_deliveries: int) -> None:
        self.stream, self.group, self.id = claimed.stream, claimed.group, claimed.id
        self.delivery_count = claimed.delivery_count
        self.idle_ms = claimed.idle_ms
        self.previous_consumer = claimed.previous_consumer
        self.route = [route(d, c, max_deliveries)
                      for d, c in zip(claimed.deleted, claimed.delivery_count, strict=True)]
        # Each row's unit, as a position in `_units` (one Unit per distinct stream, group
        # and consumer; a batch holds one unit or a few): rows are grouped by those ints,
        # whose hash costs less than a Unit's.
        made: dict[tuple[str, str, str], int] = {}
        self._unit_of: list[int] = [
            made.setdefault(key, len(made))
            for key in zip(claimed.stream, claimed.group, claimed.consumer, strict=True)]
        self._units = [Unit(*key) for key in made]
        self.fields = claimed.fields
        self.plan_of = claimed.plan_of
        self.planned = bool(claimed.planned_count)  # entries of a plan (``--plan``)
        # Rows whose carried deliveries are no count (ignored): their reason says so.
        self.odd_carried = {i for i, odd in enumerate(claimed.odd_carried) if odd}
        self.fetched: dict[int, Fields] = {}
        self._id_keys: list[tuple[int, int]] | None = None
        n = len(claimed)
        self.action: list[str | None] = [None] * n
        self.reason: list[str | None] = [None] * n
        self.error: list[str | None] = [None] * n
        self.dead_letter_id: list[str | None] = [None] * n
        self.outcome: list[str | None] = [None] * n  # what re-processing made (REPORT.outcome)
        self.entry_deleted: list[bool | None] = [None] * n
        # Per row, its ordering key, where a dead-lettered head holds its key across runs
        # (order.dead_letter_releases = false: recovery.executor.handover.ordered); else None.
        self.order_keys: list[bytes | None] | None = None

    def unit(self, i: int) -> Unit:
        return self._units[self._unit_of[i]]

    def by_route(self) -> dict[str, list[int]]:
        return group_rows(range(len(self.route)), self.route)

    def by_unit(self, rows: Iterable[int], ordered: bool = False) -> dict[Unit, list[int]]:
        """`rows` grouped by unit; with `ordered`, each group in ascending stream-ID order."""
        grouped = group_rows(rows, self._unit_of)
        if ordered:
            keys = self.id_keys()
            for unit_rows in grouped.values():
                unit_rows.sort(key=keys.__getitem__)
        return {self._units[k]: unit_rows for k, unit_rows in grouped.items()}

    def id_keys(self) -> list[tuple[int, int]]:
        """Each row's ID as (ms, seq), for ordering (computed once per batch)."""
        if self._id_keys is None:
            self._id_keys = [stream_id_key(i) for i in self.id]
        return self._id_keys

    def id_range(self, rows: list[int]) -> tuple[str, str]:
        """The smallest and the largest stream ID of `rows`."""
        key = self.id_keys().__getitem__
        return self.id[min(rows, key=key)], self.id[max(rows, key=key)]

    def has_fields(self, i: int) -> bool:
        return self.fields[i] is not None or i in self.fetched

    def fields_of(self, i: int) -> Fields:
        """Row `i`'s fields as claimed, or as fetched for an entry taken back (the row must
        have them: ``has_fields``)."""
        fields = self.fields[i]
        return fields if fields is not None else self.fetched[i]

    def add_carried(self, i: int) -> None:
        """Add to row `i`'s delivery count the deliveries its fetched fields carry (an entry
        taken back: the claim did not read them); flag it when their value is no count."""
        fields = self.fetched[i]
        self.delivery_count[i] = with_carried(self.delivery_count[i], fields)
        if odd_carried(fields):
            self.odd_carried.add(i)

    def messages(self, rows: list[int]) -> list[Message]:
        """The handler's messages for `rows`, in order."""
        fields, fetched, stream, group, ids, counts = (
            self.fields, self.fetched, self.stream, self.group, self.id, self.delivery_count)
        return [Message(stream[i], group[i], ids[i],
                        fetched[i] if fields[i] is None else fields[i],  # type: ignore[arg-type]
                        counts[i] or 0)
                for i in rows]

    def set_rows(self, rows: list[int], action: str, reason: str | None = None) -> None:
        """Record the same outcome, without error or new IDs, for every row of `rows` (as
        :meth:`set` would, in one loop)."""
        taken = next((i for i in rows if self.action[i] is not None), None)
        if taken is not None:
            raise RuntimeError(f"entry {self.stream[taken]} {self.id[taken]} reported twice")
        actions, reasons = self.action, self.reason
        for i in rows:
            actions[i] = action
            reasons[i] = reason

    def set(self, i: int, action: str, reason: str | None = None, error: str | None = None,
            dead_letter_id: str | None = None, outcome: str | None = None,
            entry_deleted: bool | None = None) -> None:
        """Record row `i`'s action and what came of it (`outcome`: what re-processing made,
        e.g. the copy's ID); a second action for the same row is a bug."""
        if self.action[i] is not None:
            raise RuntimeError(f"entry {self.stream[i]} {self.id[i]} reported twice")
        self.action[i], self.reason[i], self.error[i] = action, reason, error
        self.dead_letter_id[i], self.outcome[i] = dead_letter_id, outcome
        self.entry_deleted[i] = entry_deleted

    def report(self, outcome_columns: tuple[str, ...] = ()) -> pa.RecordBatch:
        """The REPORT batch: the row's own columns plus its outcome, in input order; the
        outcome also in `outcome_columns` (of ``schemas.OUTCOME_COLUMNS``: the mode's), the
        others of those null."""
        missing = [i for i, a in enumerate(self.action) if a is None]
        if missing:
            i = missing[0]
            raise RuntimeError(f"{len(missing)} entries got no outcome, e.g. "
                               f"{self.stream[i]} {self.id[i]}")
        if self.planned:
            for i in range(len(self.action)):
                self._note_count_change(i)
        for i in self.odd_carried:
            self._add_reason(i, ODD_CARRIED)
        nulls = [None] * len(self.action)
        return report_batch({
            "stream": self.stream, "group": self.group, "id": self.id,
            "previous_consumer": self.previous_consumer,
            "delivery_count": self.delivery_count, "idle_ms": self.idle_ms,
            "action": self.action, "reason": self.reason, "error": self.error,
            "dead_letter_id": self.dead_letter_id, "entry_deleted": self.entry_deleted,
            "outcome": self.outcome,
            **{name: self.outcome if name in outcome_columns else nulls
               for name in OUTCOME_COLUMNS},
        })

    def _note_count_change(self, i: int) -> None:
        """A planned entry handled with another delivery count than its plan's: its reason
        says so (the current count decided its route)."""
        planned, _ = self.plan_of(i)
        count = self.delivery_count[i]
        if planned is None or count == planned:
            return
        self._add_reason(i, f"delivery count changed since the plan (planned {planned}, "
                            f"now {count}): the current count decided")

    def _add_reason(self, i: int, words: str) -> None:
        """Append `words` to row `i`'s reason (or make them its reason), except for a row
        whose count decided nothing (skipped, deleted upstream, count unknown)."""
        if self.delivery_count[i] is None or self.action[i] in (Action.SKIPPED, Action.DELETED):
            return
        self.reason[i] = f"{self.reason[i]}; {words}" if self.reason[i] else words


def group_rows(rows: Iterable[int], keys: Sequence[K]) -> dict[K, list[int]]:
    """`rows` grouped by their keys (`keys[row]`), in first-seen order, each group in input
    order."""
    grouped: dict[K, list[int]] = defaultdict(list)
    for i in rows:
        grouped[keys[i]].append(i)
    return grouped
