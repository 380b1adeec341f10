"""The IDs of the entries a unit's claim steps (or a split unit's part's) counted as found,
kept compactly until the read of what the claim left (``recovery.executor.claim.loop``:
``left_reads``, a part's ``ranges_left``) has skipped them: a live consumer may take an
entry from the job's consumer between its claim step and that read, and the read must not
count its row a second time. Pure: no I/O.

Each step's IDs are one ``bytes`` (the IDs joined by spaces, about 16 bytes an entry:
about 16 MB for a unit of 1,000,000 entries) with the step's first and last ID. A lookup
finds its step by ID range, then looks in the step's IDs, split into a set only for a step
a lookup falls in, one step at a time (the read goes through the PEL in ID order).
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable, Sequence
from operator import itemgetter

IdKey = tuple[int, int]  # (ms, seq) of an ID "<ms>-<seq>"


def id_key(entry_id: bytes) -> IdKey:
    """Sort key of a stream ID as Redis sends it (``b"<ms>-<seq>"``): numeric."""
    ms, _, seq = entry_id.partition(b"-")
    return int(ms), int(seq or 0)


class ClaimedIds:
    """IDs added step by step (:meth:`add`: each step's ascending, the steps' ID ranges
    apart, as a unit's claim steps tile its PEL, or a part's the ranges it took) or loose
    (:meth:`add_loose`: the entries taken back, anywhere in those ranges, already held as
    rows by the claim loop); which of them an ID is (:meth:`holds`)."""

    def __init__(self) -> None:
        self._steps: list[tuple[IdKey, IdKey, bytes]] = []  # first, last, IDs joined
        self._firsts: list[IdKey] | None = None  # each step's first ID, steps sorted
        self._open: tuple[int, frozenset[bytes]] | None = None  # a step's IDs, split
        self._loose: set[bytes] = set()

    def add(self, ids: Sequence[bytes]) -> None:
        """Keep one step's IDs (ascending)."""
        if ids:
            self._steps.append((id_key(ids[0]), id_key(ids[-1]), b" ".join(ids)))
            self._firsts = self._open = None

    def add_loose(self, ids: Iterable[bytes]) -> None:
        """Keep IDs that lie anywhere."""
        self._loose.update(ids)

    def holds(self, entry_id: bytes) -> bool:
        """Whether `entry_id` is one of the IDs kept."""
        if entry_id in self._loose:
            return True
        if not self._steps:
            return False
        if self._firsts is None:
            self._steps.sort(key=itemgetter(0))
            self._firsts = [step[0] for step in self._steps]
        key = id_key(entry_id)
        i = bisect_right(self._firsts, key) - 1
        if i < 0 or key > self._steps[i][1]:
            return False
        if self._open is None or self._open[0] != i:
            self._open = (i, frozenset(self._steps[i][2].split(b" ")))
        return entry_id in self._open[1]
