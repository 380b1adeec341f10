"""A CLAIMED Arrow batch on the executor, routed and seen row by row. Pure Arrow, no I/O
(``recovery.apply`` does the Redis side).

- ``routes``: where each entry goes. The claimed set crosses Spark packed
  (``recovery.packing``), so the route is decided here, batch by batch, not as a Spark
  expression.
- ``RoutedBatch``: one batch row by row: its columns as Python lists, its routes, grouped by
  unit and route, the handler's messages, and the outcome of each row, which become the
  REPORT batch.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable
from typing import TypeVar

import pyarrow as pa
import pyarrow.compute as pc

from recovery.handlers import Message
from recovery.schemas import (
    REPORT,
    ROUTE_DEAD_LETTER,
    ROUTE_DELETED,
    ROUTE_GONE,
    ROUTE_HANDLE,
    arrow,
)
from recovery.scripts import stream_id_key
from recovery.streams import Fields

Unit = tuple[str, str, str]  # stream, group, job consumer
K = TypeVar("K")
REPORT_ARROW = arrow(REPORT)


def routes(batch: pa.RecordBatch, max_deliveries: int) -> pa.StringArray:
    """The route of each entry of a CLAIMED batch, the first that holds of: deleted upstream;
    delivery count unknown (gone from the job's PEL); delivery count (after this run's
    claim) above `max_deliveries` (dead letter); else the handler."""
    count = batch.column("delivery_count")
    conditions = pc.make_struct(
        batch.column("deleted"),
        pc.is_null(count),
        pc.fill_null(pc.greater(count, max_deliveries), False),
        field_names=["deleted", "gone", "over_limit"],
    )
    return pc.case_when(conditions, ROUTE_DELETED, ROUTE_GONE, ROUTE_DEAD_LETTER,
                        ROUTE_HANDLE).cast(pa.string())


class RoutedBatch:
    """One CLAIMED Arrow batch seen column by column, the route of each row (``routes``), and
    the outcome of each row.

    Rows are indices. ``messages(rows)`` builds the (name, value) pairs of those rows only
    (only rows handed to the handler need them). Every row gets exactly one outcome (``set``);
    ``report()`` turns the outcomes into a REPORT batch.
    """

    def __init__(self, batch: pa.RecordBatch, run_id: str, max_deliveries: int) -> None:
        self.batch, self.run_id = batch, run_id
        column = batch.column
        self.stream: list[str] = column("stream").to_pylist()
        self.group: list[str] = column("group").to_pylist()
        self.consumer: list[str] = column("consumer").to_pylist()
        self.id: list[str] = column("id").to_pylist()
        self.route: list[str] = routes(batch, max_deliveries).to_pylist()
        self.delivery_count: list[int | None] = column("delivery_count").to_pylist()
        self.idle_ms: list[int | None] = column("idle_ms").to_pylist()
        self.previous_consumer: list[str | None] = column("previous_consumer").to_pylist()
        self.units: list[Unit] = list(zip(self.stream, self.group, self.consumer, strict=True))
        self.fetched: dict[int, Fields] = {}
        self._claimed_fields: list[bool] = column("fields").is_valid().to_pylist()
        self._flat: tuple[list[int], list[bytes], list[bytes]] | None = None
        self._id_keys: list[tuple[int, int]] | None = None
        n = batch.num_rows
        self.action: list[str | None] = [None] * n
        self.reason: list[str | None] = [None] * n
        self.error: list[str | None] = [None] * n
        self.dead_letter_id: list[str | None] = [None] * n

    def unit(self, i: int) -> Unit:
        return self.units[i]

    def by_route(self) -> dict[str, list[int]]:
        return group_rows(range(len(self.route)), self.route.__getitem__)

    def by_unit(self, rows: Iterable[int], ordered: bool = False) -> dict[Unit, list[int]]:
        """`rows` grouped by unit; with `ordered`, each group in ascending stream-ID order."""
        grouped = group_rows(rows, self.units.__getitem__)
        if ordered:
            keys = self.id_keys()
            for unit_rows in grouped.values():
                unit_rows.sort(key=keys.__getitem__)
        return grouped

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
        return self._claimed_fields[i] or i in self.fetched

    def _flat_fields(self) -> tuple[list[int], list[bytes], list[bytes]]:
        """(offsets, names, values) of the batch's fields column, converted once: row i's
        fields are names/values[offsets[i]:offsets[i + 1]]."""
        if self._flat is None:
            col = self.batch.column("fields")
            offsets = col.offsets.to_pylist()  # into col.values, which ignores any slicing
            base = offsets[0]
            struct = col.values.slice(base, offsets[-1] - base)
            self._flat = ([o - base for o in offsets], struct.field("name").to_pylist(),
                          struct.field("value").to_pylist())
        return self._flat

    def messages(self, rows: list[int]) -> list[Message]:
        """The handler's messages for `rows`, in order."""
        offsets, names, values = self._flat_fields()
        fetched, stream, group, ids, counts = (self.fetched, self.stream, self.group, self.id,
                                               self.delivery_count)
        return [Message(stream[i], group[i], ids[i],
                        fetched[i] if i in fetched else
                        list(zip(names[offsets[i]:offsets[i + 1]],
                                 values[offsets[i]:offsets[i + 1]], strict=True)),
                        int(counts[i] or 0))
                for i in rows]

    def set(self, i: int, action: str, reason: str | None = None, error: str | None = None,
            dead_letter_id: str | None = None) -> None:
        """Record row `i`'s outcome; a second outcome for the same row is a bug."""
        if self.action[i] is not None:
            raise RuntimeError(f"entry {self.stream[i]} {self.id[i]} reported twice")
        self.action[i], self.reason[i], self.error[i] = action, reason, error
        self.dead_letter_id[i] = dead_letter_id

    def report(self) -> pa.RecordBatch:
        """The REPORT batch: the row's own columns plus its outcome, in input order."""
        missing = [i for i, a in enumerate(self.action) if a is None]
        if missing:
            i = missing[0]
            raise RuntimeError(f"{len(missing)} entries got no outcome, e.g. "
                               f"{self.stream[i]} {self.id[i]}")
        column = self.batch.column
        n = self.batch.num_rows
        return pa.RecordBatch.from_arrays([
            pa.array([self.run_id] * n, pa.string()), column("stream"), column("group"),
            column("id"), column("previous_consumer"), column("delivery_count"),
            column("idle_ms"), pa.array(self.action, pa.string()),
            pa.array(self.reason, pa.string()), pa.array(self.error, pa.string()),
            pa.array(self.dead_letter_id, pa.string()),
        ], schema=REPORT_ARROW)


def group_rows(rows: Iterable[int], key: Callable[[int], K]) -> dict[K, list[int]]:
    """`rows` grouped by `key(row)`, in first-seen order, each group in input order."""
    grouped: dict[K, list[int]] = defaultdict(list)
    for i in rows:
        grouped[key(i)].append(i)
    return grouped
