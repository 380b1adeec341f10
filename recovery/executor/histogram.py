"""PEL histograms: delivery counts and idle ages of pending entries, counted as XPENDING rows
are read (by the health pass, or by the claim steps of a one-pass run). Pure: no I/O.

Buckets have fixed labels so that runs compare.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import replace
from functools import partial
from operator import itemgetter

from recovery.executor.claimed_ids import ClaimedIds
from recovery.redis_io.streams import COUNT, ID, IDLE, PendingRow, as_str
from recovery.rows import Counts, HistogramRow, unit_key

# (exclusive upper bound, label)
DELIVERY_BUCKETS = ((2, "1"), (3, "2"), (4, "3"), (6, "4-5"), (11, "6-10"), (101, "11-100"))
IDLE_BUCKETS_MS = ((60_000, "<1m"), (600_000, "1m-10m"), (3_600_000, "10m-1h"),
                   (86_400_000, "1h-1d"), (604_800_000, "1d-7d"))
IDLE_BOUNDS = [upper for upper, _ in IDLE_BUCKETS_MS]
IDLE_LABELS = [label for _, label in IDLE_BUCKETS_MS] + [">7d"]


def bucket(value: int, buckets: tuple[tuple[int, str], ...], overflow: str) -> str:
    """The label of the first bucket with `value` below its upper bound, else `overflow`."""
    for upper, label in buckets:
        if value < upper:
            return label
    return overflow


# Delivery count -> its bucket's label, for the counts below the last bound (one list
# index per count a histogram row holds, instead of a walk over the buckets).
DELIVERY_LABELS = [bucket(n, DELIVERY_BUCKETS, ">100") for n in range(DELIVERY_BUCKETS[-1][0])]


class PelHistogram:
    """Delivery counts and idle ages of PEL rows, counted as they are read (one unit's)."""

    def __init__(self) -> None:
        self.counts: Counter[int] = Counter()  # delivery count -> entries
        self.ages: Counter[int] = Counter()  # idle-age bucket (index in IDLE_LABELS) -> entries
        self.oldest: int | None = None  # largest idle time seen, ms
        self.left_counted = False  # whether the rows the claim left were counted
        # IDs of entries this run claimed (its claim steps counted their rows as found) that
        # its hand-over left pending (failed, skipped, held, reassigned...): by the read of
        # what the claim left, another consumer may own them (a reassignment, or a live
        # consumer's claim meanwhile), so that read skips them.
        self.kept: set[str] = set()
        # With a read of what the claim left right after the loop (a claim materialised
        # before its hand-over): the IDs of every entry the claim steps counted as found, so
        # that read skips those a live consumer took from the job meanwhile. None: not kept.
        self.claimed: ClaimedIds | None = None

    def add_claimed(self, rows: Sequence[PendingRow], loose: bool = False) -> None:
        """Count the rows of entries a claim step claimed, as found, noting their IDs in
        ``claimed`` when it is kept (`loose`: rows of entries taken back, in no step's
        order: ``ClaimedIds.add_loose``)."""
        self.add(rows)
        if self.claimed is not None:
            ids = list(map(itemgetter(ID), rows))
            if loose:
                self.claimed.add_loose(ids)
            else:
                self.claimed.add(ids)

    def add_left(self, rows: Sequence[PendingRow]) -> None:
        """Count the rows the unit's claim left to other consumers (no read of them
        follows: ``recovery.executor.claim.loop.left_reads`` is skipped)."""
        self.add(rows)
        self.left_counted = True
        self.claimed = None

    def add_unclaimed(self, rows: Sequence[PendingRow]) -> None:
        """Count rows of the read of what the claim left (other consumers' rows), but those
        of entries the run claimed (counted as found by the claim) and kept pending
        (``kept``) or, read right after the claim, claimed at all (``claimed``): each PEL
        row is counted once, whoever owns it by now."""
        claimed = self.claimed
        self.add([row for row in rows if as_str(row[ID]) not in self.kept
                  and not (claimed is not None and claimed.holds(row[ID]))])

    def add(self, rows: Sequence[PendingRow]) -> None:
        """Count raw XPENDING rows (each ``[id, owner, idle ms, delivery count]``)."""
        if not rows:
            return
        self.counts.update(map(itemgetter(COUNT), rows))
        idles = list(map(itemgetter(IDLE), rows))
        self.ages.update(map(partial(bisect_right, IDLE_BOUNDS), idles))
        top = max(idles)
        self.oldest = top if self.oldest is None else max(self.oldest, top)

    def row(self, stream: str, group: str) -> HistogramRow:
        """The unit's PEL_HISTOGRAM row: entries by delivery-count and idle-age bucket."""
        deliveries: dict[str, int] = {}
        for count, n in self.counts.items():
            # A negative count wrapped past the server's maximum (XNACK FATAL, then a claim).
            label = DELIVERY_LABELS[count] if 0 <= count < len(DELIVERY_LABELS) else ">100"
            deliveries[label] = deliveries.get(label, 0) + n
        # A split unit's part: the driver's read of what was left skips the IDs kept pending.
        return HistogramRow(stream, group, tuple(deliveries.items()),
                            tuple((IDLE_LABELS[i], n) for i, n in self.ages.items()),
                            self.oldest, tuple(sorted(self.kept)))


def kept_ids(rows: Iterable[HistogramRow]) -> dict[tuple[str, str], set[str]]:
    """The IDs histogram rows say the run claimed and kept pending (``PelHistogram.kept``),
    by (stream, group)."""
    kept: dict[tuple[str, str], set[str]] = {}
    for row in rows:
        if row.kept:
            kept.setdefault(unit_key(row), set()).update(row.kept)
    return kept


def merged_rows(rows: Iterable[HistogramRow]) -> list[HistogramRow]:
    """Histogram rows of the same (stream, group) added up into one (the parts of a unit
    split over several tasks each count the PEL rows their steps read): bucket counts
    summed, the largest idle time kept, the IDs kept pending left out. In the order each unit
    first appears."""
    merged: dict[tuple[str, str], HistogramRow] = {}
    for row in rows:
        into = merged.get(unit_key(row))
        if into is None:
            merged[unit_key(row)] = replace(row, kept=())
            continue
        ages = [a for a in (into.oldest_idle_ms, row.oldest_idle_ms) if a is not None]
        merged[unit_key(row)] = replace(
            into, deliveries=_summed(into.deliveries, row.deliveries),
            idle_ages=_summed(into.idle_ages, row.idle_ages),
            oldest_idle_ms=max(ages) if ages else None)
    return list(merged.values())


def _summed(first: Counts, second: Counts) -> Counts:
    """Two bucket counts added up, labels in the order they first appear."""
    counts = Counter(dict(first))
    counts.update(dict(second))
    return tuple(counts.items())
