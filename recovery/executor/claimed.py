"""Claimed entries as Python columns: what the hand-over works on, to and from CLAIMED Arrow.

A claim step's reply is already Python (hiredis): the one pass hands it over as it is. Only
the materialised path (``recovery.executor.packing``: a retried task must find its input
again) turns it into a ``schemas.CLAIMED`` Arrow batch and back (that round trip costs CPU
per entry: docs/PERFORMANCE.md).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from itertools import accumulate, chain

import pyarrow as pa
import pyarrow.compute as pc

from recovery.counts import MAX_CARRIED, count_of, saturated
from recovery.params import Unit
from recovery.redis_io.streams import Fields, FlatFields
from recovery.schemas import CARRIED_DELIVERIES, CLAIMED, arrow

CLAIMED_ARROW = arrow(CLAIMED)
FIELDS_ARROW = CLAIMED_ARROW.field("fields").type


@dataclass
class Claimed:
    """Entries in claim order, one list element per entry (the CLAIMED columns).

    `fields`: the entry's (name, value) pairs as the claim read them; None where the claim did
    not read them (deleted upstream, or taken back from an earlier attempt: the hand-over
    fetches those). `delivery_count` None: unknown (no longer in the job consumer's PEL).
    `odd_carried`: True where the entry's ``CARRIED_DELIVERIES`` holds no count (ignored);
    empty when no entry's does. Times in ms.
    """

    stream: list[str]
    group: list[str]
    consumer: list[str]
    id: list[str]
    deleted: list[bool]
    previous_consumer: list[str | None]
    idle_ms: list[int | None]
    fields: list[Fields | None]
    delivery_count: list[int | None]
    planned_count: list[int | None] = field(default_factory=list)
    note: list[str | None] = field(default_factory=list)
    odd_carried: list[bool] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.id)

    @classmethod
    def of_unit(cls, unit: Unit, ids: list[str], deleted: list[bool],
                previous: list[str | None], idle_ms: list[int | None],
                fields: list[Fields | None], counts: list[int | None]) -> Claimed:
        """Entries of one unit (its stream, group and job consumer on every row)."""
        n = len(ids)
        return cls([unit.stream] * n, [unit.group] * n, [unit.consumer] * n, ids,
                   deleted, previous, idle_ms, fields, counts)

    @classmethod
    def joined(cls, parts: Sequence[Claimed]) -> Claimed:
        """The entries of `parts`, in order, as one (optional columns padded where a part has
        none, e.g. a journal's step beside planned ones)."""
        padded = {name for name in OPTIONAL_COLUMNS if any(getattr(p, name) for p in parts)}
        return cls(*(list(chain.from_iterable(_column(p, name, name in padded) for p in parts))
                     for name in cls.__dataclass_fields__))

    def add_carried(self, rows: Iterable[int]) -> None:
        """Add to the delivery count of each of `rows` the deliveries its fields carry
        (``carried_deliveries``; a count stays at most the int64 maximum); flag in
        `odd_carried` those whose carried value is no count (their count is left alone)."""
        odd = []
        counts, fields = self.delivery_count, self.fields
        for i in rows:
            value = carried_value(fields[i])
            if value is None:
                continue
            carried = count_of(value, MAX_CARRIED)
            if carried is None:
                odd.append(i)
            elif counts[i] is not None:
                counts[i] = saturated(counts[i] + carried)  # type: ignore[operator]
        if odd and not self.odd_carried:
            self.odd_carried = [False] * len(self)
        for i in odd:
            self.odd_carried[i] = True

    def plan_of(self, i: int) -> tuple[int | None, str | None]:
        """Entry `i`'s planned delivery count and note; (None, None) outside a plan."""
        if not self.planned_count:
            return None, None
        return self.planned_count[i], self.note[i]

    @classmethod
    def from_arrow(cls, batch: pa.RecordBatch) -> Claimed:
        """A CLAIMED batch (possibly a slice) as columns."""
        col = batch.column
        fields = _fields_of(col("fields"))
        return cls(col("stream").to_pylist(), col("group").to_pylist(),
                   col("consumer").to_pylist(), col("id").to_pylist(), col("deleted").to_pylist(),
                   col("previous_consumer").to_pylist(), col("idle_ms").to_pylist(),
                   fields, col("delivery_count").to_pylist(),
                   *_plan_columns(batch), _odd_carried(col("fields"), fields))

    def to_arrow(self) -> pa.RecordBatch:
        """The CLAIMED Arrow batch of these entries (what the materialised path carries)."""
        present: list[Fields] = [f or [] for f in self.fields]
        pairs = list(chain.from_iterable(present))
        struct = pa.StructArray.from_arrays(
            [pa.array([p[0] for p in pairs], pa.binary()),
             pa.array([p[1] for p in pairs], pa.binary())],
            fields=list(FIELDS_ARROW.value_type))
        fields_col = pa.ListArray.from_arrays(
            pa.array([0, *accumulate(len(f) for f in present)], pa.int32()), struct,
            type=FIELDS_ARROW, mask=pa.array([f is None for f in self.fields], pa.bool_()))
        return pa.RecordBatch.from_arrays([
            pa.array(self.stream, pa.string()), pa.array(self.group, pa.string()),
            pa.array(self.consumer, pa.string()), pa.array(self.id, pa.string()),
            pa.array(self.deleted, pa.bool_()), pa.array(self.previous_consumer, pa.string()),
            pa.array(self.idle_ms, pa.int64()), fields_col,
            pa.array(self.delivery_count, pa.int64()),
            pa.array(_column(self, "planned_count", True), pa.int64()),
            pa.array(_column(self, "note", True), pa.string()),
        ], schema=CLAIMED_ARROW)


# Columns that may be empty (no entry has one), and what an entry has in place of one.
OPTIONAL_COLUMNS = {"planned_count": None, "note": None, "odd_carried": False}


def _column(claimed: Claimed, name: str, padded: bool) -> list:  # type: ignore[type-arg]
    """`claimed`'s column `name`; an empty optional column as its default per entry when
    `padded`."""
    values = getattr(claimed, name)
    if name in OPTIONAL_COLUMNS and not values and padded:
        return [OPTIONAL_COLUMNS[name]] * len(claimed)
    return values  # type: ignore[no-any-return]


def _plan_columns(batch: pa.RecordBatch) -> tuple[list, list]:  # type: ignore[type-arg]
    """A CLAIMED batch's plan columns; empty lists when it holds no planned entry."""
    planned = batch.column("planned_count")
    if planned.null_count == len(planned):
        return [], []
    return planned.to_pylist(), batch.column("note").to_pylist()


def field_pairs(flats: Sequence[FlatFields]) -> list[Fields]:
    """Redis' flat field lists (``[n1, v1, n2, v2]``) as (name, value) pairs, one list per
    entry: all pairs built at once, then sliced (cheaper than one zip per entry)."""
    flat = list(chain.from_iterable(flats))
    pairs = list(zip(flat[0::2], flat[1::2], strict=True))
    ends = list(accumulate(len(f) // 2 for f in flats))
    return [pairs[end - len(f) // 2 : end] for f, end in zip(flats, ends, strict=True)]


def _fields_of(col: pa.ListArray) -> list[Fields | None]:
    """A CLAIMED ``fields`` column (possibly sliced) as per-entry pairs or None."""
    offsets = col.offsets.to_pylist()  # into col.values, which ignores any slicing
    base = offsets[0]
    struct = col.values.slice(base, offsets[-1] - base)
    pairs = list(zip(struct.field("name").to_pylist(), struct.field("value").to_pylist(),
                     strict=True))
    return [pairs[offsets[i] - base : offsets[i + 1] - base] if valid else None
            for i, valid in enumerate(col.is_valid().to_pylist())]


def _odd_carried(col: pa.ListArray, fields: list[Fields | None]) -> list[bool]:
    """The `odd_carried` flags of a CLAIMED ``fields`` column (`fields`: the same as pairs),
    empty when no entry's carried value is odd: recomputed, so the flags need no column of
    their own; the entries are looked at only when Arrow finds a ``CARRIED_DELIVERIES``."""
    if not pc.any(pc.equal(col.flatten().field("name"), CARRIED_DELIVERIES)).as_py():
        return []
    flags = [odd_carried(f) for f in fields]
    return flags if any(flags) else []


def carried_value(fields: Fields | None) -> bytes | None:
    """The value of ``CARRIED_DELIVERIES`` in `fields` (its first), or None without one."""
    for name, value in fields or ():
        if name == CARRIED_DELIVERIES:
            return value
    return None


def carried_deliveries(fields: Fields | None) -> int:
    """Deliveries a requeued copy carries from its original (``CARRIED_DELIVERIES``; 0 for
    an entry that is no copy, or whose value is no count: ``recovery.counts.count_of`` up
    to ``MAX_CARRIED``)."""
    return count_of(carried_value(fields), MAX_CARRIED) or 0


def carrying(flats: Sequence[FlatFields]) -> list[int]:
    """The positions of the entries whose flat fields may hold ``CARRIED_DELIVERIES`` (a
    name or a value equal to it): the only ones :func:`with_carried` can change. One
    membership test per entry, in C, instead of a Python loop over its pairs."""
    return [i for i, flat in enumerate(flats) if CARRIED_DELIVERIES in flat]


def odd_carried(fields: Fields | None) -> bool:
    """Whether `fields` hold ``CARRIED_DELIVERIES`` with a value that is no count."""
    value = carried_value(fields)
    return value is not None and count_of(value, MAX_CARRIED) is None


def with_carried(count: int | None, fields: Fields | None) -> int | None:
    """A delivery count from the PEL plus the deliveries `fields` carry, at most the int64
    maximum (a negative PEL count, wrapped past the maximum, reads as it); None stays None:
    the entry is no longer the job's."""
    return None if count is None else saturated(count + carried_deliveries(fields))


def copy_fields(fields: Fields, deliveries: int) -> Fields:
    """A requeued copy's fields: the entry's own, without an earlier copy's carried count,
    then ``CARRIED_DELIVERIES`` = `deliveries` (to the application so far)."""
    own = [pair for pair in fields if pair[0] != CARRIED_DELIVERIES]
    return [*own, (CARRIED_DELIVERIES, str(deliveries).encode())]
