"""One big PEL spread over several parts (issue 49): which units are split, over how many
parts, and what the driver reads of them after the pass.

A unit (stream and group) is split when it holds at least ``spark.split_min_pending``
entries and more than its share of the run (all units' pending entries over
``spark.partitions``): then several parts, each a task with a job consumer of its own,
claim its PEL through one shared cursor (``recovery.redis_io.split_cursors``), step by
step, each step taking the next ``claim.count`` rows. Parts balance by entries whatever
the PEL's shape, none waits for another, and no row is read by two steps. Small units stay
whole: the run of 10,000 small streams is the run it always was.
"""

from __future__ import annotations

import contextlib
import logging
import math
from bisect import bisect_right
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeVar

import redis
from redis.exceptions import ResponseError

from recovery.executor.claimed_ids import IdKey, id_key
from recovery.executor.histogram import PelHistogram
from recovery.params import Unit
from recovery.redis_io.claim_due import taken_range
from recovery.redis_io.commands import list_items
from recovery.redis_io.error_codes import unit_vanished
from recovery.redis_io.split_cursors import (
    TTL_MS,
    cursor_key,
    new_nonce,
    open_cursors,
    ranges_key,
)
from recovery.redis_io.streams import ID, OWNER, drop_keys, pending_pages, shown
from recovery.rows import HistogramRow

if TYPE_CHECKING:
    from recovery.driver.discovery import WorkUnit

log = logging.getLogger(__name__)

T = TypeVar("T")
SHOWN = 10  # split units named in the log line at most
LEFT_PAGE = 10_000  # XPENDING rows per read of what a split unit's parts left
ABOVE_IDS = 2**64  # above an ID's milliseconds part (64-bit unsigned)


def split_counts(pending: Sequence[int], partitions: int, min_pending: int,
                 step: int) -> list[int]:
    """How many parts claim each unit (`pending`: each unit's PEL size): 1 (whole) unless it
    holds at least `min_pending` entries (0: never split) and more than its share of the
    run (all pending over `partitions`); then as many as its share of the run, at most
    `partitions`, and at most one per claim `step` (entries per claim step) it holds."""
    total = sum(pending)
    if min_pending <= 0 or partitions < 2 or not total:
        return [1] * len(pending)
    share = total / partitions
    return [max(1, min(partitions, math.ceil(n / share), n // step))
            if n >= min_pending and n > share else 1 for n in pending]


def left_histogram(client: redis.Redis, stream: str, group: str,
                   is_job: Callable[[str], bool], kept: set[str] | None = None,
                   counted: Callable[[bytes], bool] | None = None) -> PelHistogram:
    """The rows a split unit's parts left to other consumers once the pass is done (what the
    claim of a whole unit reads after its hand-over): its PEL's rows not owned by this run's
    job consumers (`is_job`: a consumer name's test). A stream or group that vanished
    meanwhile counts what was read before (nothing, usually): it costs only itself. The
    rows of `kept` (IDs the parts claimed and left pending: their steps counted them, and
    another consumer may own them by now) are skipped, and those whose ID `counted` holds
    (in a range whose part counted it: ``in_ranges``)."""
    histogram = PelHistogram()
    histogram.kept = kept or set()
    try:
        for page in pending_pages(client, stream, group, LEFT_PAGE):
            histogram.add_unclaimed([row for row in page if not is_job(shown(row[OWNER]))
                                     and not (counted is not None and counted(row[ID]))])
    except ResponseError as exc:
        if not unit_vanished(exc):
            raise
    return histogram


def in_ranges(taken: Iterable[str]) -> Callable[[bytes], bool]:
    """The test of an ID (as Redis sends it) for lying in one of the ranges `taken` (parts'
    claim steps' ranges: ``claim_due.lua``, ``<start> <last>`` each; they do not overlap)."""
    bounds = sorted((id_key(first.encode()), _last_key(last))
                    for first, last in map(taken_range, taken))
    firsts = [first for first, _ in bounds]

    def inside(entry_id: bytes) -> bool:
        key = id_key(entry_id)
        i = bisect_right(firsts, key) - 1
        return i >= 0 and key <= bounds[i][1]

    return inside


def _last_key(last: str) -> IdKey:
    """The sort key of a range's last ID, ``+`` above every ID."""
    return (ABOVE_IDS, 0) if last == "+" else id_key(last.encode())


@dataclass
class Split:
    """The run's split units: how many parts claim each unit (in discovery order), the
    cursors created (with a TTL) and, once the parts are assigned (``assigned``), by
    (stream, group) the cursor of each unit that really got several parts, and the keys of
    the parts' lists of ranges taken (``ranges_key``, made by the claim script), also by
    (stream, group) in ``lists``."""

    counts: list[int]
    keys: dict[tuple[str, str], str]
    created: list[str] = field(default_factory=list)
    parts: list[str] = field(default_factory=list)
    lists: dict[tuple[str, str], list[str]] = field(default_factory=dict)

    def assigned(self, parts: Sequence[tuple[Unit, int]], run_id: str) -> None:
        """Keep the units the assignment gave several parts (on a Redis Cluster a unit gets
        at most its primary's parts: with one, it stays whole) and note their parts' lists;
        log them."""
        tasks = Counter((u.stream, u.group) for u, _ in parts if u.cursor)
        self.keys = {key: cursor for key, cursor in self.keys.items() if key in tasks}
        self.lists = {}
        for u, _ in parts:
            if u.cursor:
                self.lists.setdefault((u.stream, u.group), []).append(
                    ranges_key(u.cursor, u.consumer))
        self.parts = [key for keys in self.lists.values() for key in keys]
        if not self.keys:
            return
        shown_units = [f"{s} / {g}: {n} tasks" for (s, g), n in tasks.items()][:SHOWN]
        log.info("run %s: %d streams split over several tasks each (%s%s)", run_id,
                 len(self.keys), ", ".join(shown_units), ", ..." if len(tasks) > SHOWN else "")

    def cursor(self, unit: WorkUnit) -> str | None:
        """`unit`'s cursor key, None for a unit claimed whole."""
        return self.keys.get((unit.stream, unit.group))

    def left_rows(self, client: redis.Redis, is_job: Callable[[str], bool],
                  kept: dict[tuple[str, str], set[str]], outside_parts: bool = False
                  ) -> list[HistogramRow]:
        """A histogram row per split unit of what its parts left to consumers other than
        the run's (`is_job`: a consumer name's test), but the entries they claimed and kept
        pending (`kept`, by unit: ``histogram.kept_ids``) and, with `outside_parts` (each
        part counted what was left in its ranges: a materialised claim,
        ``recovery.executor.claim.loop.ranges_left``), every row in a part's range, read
        from the parts' lists; the parts' own rows come with their tallies (add them up:
        ``merged_rows``)."""
        return [left_histogram(client, stream, group, is_job, kept.get((stream, group)),
                               self._counted(client, (stream, group)) if outside_parts
                               else None).row(stream, group) for stream, group in self.keys]

    def _counted(self, client: redis.Redis, unit: tuple[str, str]) -> Callable[[bytes], bool]:
        """The test of an ID for lying in a range one of `unit`'s parts took (its parts'
        lists, one LRANGE each)."""
        return in_ranges([taken for key in self.lists.get(unit, [])
                          for taken in list_items(client, key)])


def open_split(client: redis.Redis, units: Sequence[WorkUnit], partitions: int,
               min_pending: int, step: int, run_id: str) -> Split | None:
    """Choose the units to split (``split_counts``) and create their cursors. None when no
    unit is split, or when the server refuses the cursors (an ACL user without their keys or
    commands: every unit is then claimed whole, as a line in the log says)."""
    counts = split_counts([u.pending for u in units], partitions, min_pending, step)
    nonce = new_nonce()  # this opening's names: never a list another run (same ID) recorded
    keys = {(u.stream, u.group): key for u, k in zip(units, counts, strict=True) if k > 1
            for key in [cursor_key(u.stream, u.group, run_id, nonce)] if key is not None}
    if not keys:
        return None
    refusal = open_cursors(client, list(keys.values()))
    if refusal is not None:
        log.info("run %s: %d streams hold more than their share of the run, but their claim "
                 "cursors cannot be kept in Redis (%s): each is claimed by one task "
                 "(docs/ACL.md: the cursors' keys and commands)", run_id, len(keys), refusal)
        return None
    counts = [k if (u.stream, u.group) in keys else 1 for u, k in zip(units, counts, strict=True)]
    return Split(counts, keys, list(keys.values()))


@contextlib.contextmanager
def split_units(client: redis.Redis, units: Sequence[WorkUnit], partitions: int,
                min_pending: int, step: int, run_id: str, wanted: bool = True
                ) -> Iterator[Split | None]:
    """The run's split (``open_split``; None when not `wanted`: a dry run, a plan's run, or
    when no unit is split) for the duration; then its cursors and range lists deleted (what
    cannot be deleted expires)."""
    split = open_split(client, units, partitions, min_pending, step, run_id) if wanted else None
    try:
        yield split
    finally:
        if split is not None:
            drop_keys(client, [*split.created, *split.parts],
                      "split cursor(s) and range lists", TTL_MS // 1000)
