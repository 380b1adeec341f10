"""Which units a progress tick reads when it knows the order the executors take them in.

A partition works through its units one after the other, in the order the driver assigned
them (``recovery.driver.discovery.assign``; small units' first claim steps go out in rounds
of at most ``recovery.executor.claim.first_steps.MAX_UNITS``). So at any moment each part has a
*frontier*: the furthest of its units the job has reached. Behind it, units are done or
still held by the job (claimed, not yet acked); beyond it, units are as at the baseline and
need no reading. A tick therefore reads, per part, its units from the first one not
*settled* to beyond where the frontier was by as much as it moved in the previous interval
(at least ``CHUNK`` units), and further, in steps growing by half, while it keeps finding
units the job reached within ``CHUNK`` of the end of what it read. Its cost follows the
units the job reached since the previous tick, not the number of streams, and its totals
keep up with the run while the job reaches fewer units between two ticks than a tick may
read (``recovery.driver.progress.reporter.UNITS_PER_TICK``), where reading a fixed share of the
unfinished units round robin lagged behind.

A unit is settled, and no tick reads it again, once it is finished (``ProgressState``; as
the round robin skipped them too); the final reading reads every unit anyway. A unit behind
the frontier that is not finished (held by the job, or passed without claiming anything:
too fresh, owned by a live consumer) is read at every tick. What others do to units beyond
the frontier (a live consumer's acks) shows once the frontier comes near them, or at the
final reading; within what a tick reads, their moves look like the job's and make it read
further than it needs. Pure: positions and unit indices only; the reporter
(``recovery.driver.progress.reporter``) reads Redis and tells a walk what moved.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Iterable, Sequence
from itertools import zip_longest

from recovery.params import Unit

CHUNK = 128  # units per part a tick reads beyond the frontier to find it (and at least per step)


def parts_order(units: Sequence[tuple[str, str]], parts: Iterable[tuple[str, str, int]]
                ) -> list[list[int]]:
    """Per part, the indices into `units` ((stream, group) pairs) of its units in the order
    the part takes them; `parts`: (stream, group, part) in assignment order. Raises
    ValueError unless every unit is in exactly one part."""
    index = {unit: i for i, unit in enumerate(units)}
    order: dict[int, list[int]] = {}
    for stream, group, part in parts:
        order.setdefault(part, []).append(index[(stream, group)])
    result = [order.get(p, []) for p in range(max(order, default=-1) + 1)]
    if sorted(i for part in result for i in part) != list(range(len(units))):
        raise ValueError("the parts do not hold every unit exactly once")
    return result


def progress_parts(parts: list[tuple[Unit, int]]) -> list[tuple[str, str, int]]:
    """(stream, group, part) in the order each part takes its units, each unit once (the
    progress frontier's order): a split unit, taken first by each of its parts, counts as
    the first part's."""
    seen: set[tuple[str, str]] = set()
    result = []
    for shared in (True, False):
        for unit, part in parts:
            key = (unit.stream, unit.group)
            if (unit.cursor is not None) == shared and key not in seen:
                seen.add(key)
                result.append((*key, part))
    return result


class Frontier:
    """Per part (`order`: unit indices in the order the part takes them), where its frontier
    was seen and where its first unit not settled is; :meth:`walk` plans one tick."""

    def __init__(self, order: Sequence[Sequence[int]]) -> None:
        self._last: Walk | None = None
        self.order = [list(units) for units in order]
        self.cursor = [0] * len(self.order)  # position of the first unit not settled
        self.furthest = [-1] * len(self.order)  # position of the furthest unit seen moved
        self.step = [CHUNK] * len(self.order)  # how far a tick reads beyond the frontier
        self.settled: set[int] = set()
        self._where = {i: (p, pos) for p, units in enumerate(self.order)
                       for pos, i in enumerate(units)}

    def walk(self, finished: Callable[[int], bool]) -> Walk:
        """A new tick's walk, starting where the last one left off; first the last walk's
        units that are `finished` now (as its reading was taken in) are settled."""
        if self._last is not None:
            self._last.settle(finished)
        self._last = Walk(self)
        return self._last

    def position(self, unit: int) -> tuple[int, int]:
        """(part, position in the part) of unit index `unit`."""
        return self._where[unit]


class Walk:
    """One tick's reads: :meth:`next_units` to read, :meth:`saw` what moved among them,
    again until :meth:`next_units` has none (the next ``Frontier.walk`` settles them).
    `truncated` is True once the tick's budget stopped a part before its frontier was
    found."""

    def __init__(self, frontier: Frontier) -> None:
        self._f = frontier
        self._read_to = list(frontier.cursor)  # per part, positions read this tick end here
        self._want = [max(c, f + 1) + s for c, f, s in
                      zip(frontier.cursor, frontier.furthest, frontier.step, strict=True)]
        self._start_furthest = list(frontier.furthest)
        self._search: dict[int, list[int]] = {}  # part -> [last seen moved, first not] positions
        self.truncated = False

    def next_units(self, budget: int) -> list[int]:
        """The next units to read (unit indices, parts interleaved), at most `budget`: per
        part, those not settled from where this tick's reads end up to where it wants to
        read; [] when the walk is done."""
        runs = []
        for p, units in enumerate(self._f.order):
            end = min(self._want[p], len(units))
            runs.append([(p, pos) for pos in range(self._read_to[p], end)
                         if units[pos] not in self._f.settled])
            self._read_to[p] = max(self._read_to[p], end)
        picked = [pair for pairs in zip_longest(*runs) for pair in pairs if pair is not None]
        if len(picked) > budget:
            self.truncated = True
            for p, pos in picked[budget:]:
                self._read_to[p] = min(self._read_to[p], pos)
                self._want[p] = self._read_to[p]
            picked = picked[:budget]
        return [self._f.order[p][pos] for p, pos in picked]

    def saw(self, moved: Iterable[int]) -> None:
        """`moved`: the units just read that the job has reached (not as at the baseline).
        A part whose furthest moved unit is within ``CHUNK`` of the end of what it read
        reads on, half as far again as it read this tick (at least ``CHUNK``)."""
        f = self._f
        for unit in moved:
            p, pos = f.position(unit)
            f.furthest[p] = max(f.furthest[p], pos)
        for p in range(len(f.order)):
            if self._may_lie_beyond(p):
                grown = (self._read_to[p] - f.cursor[p]) // 2
                self._want[p] = self._read_to[p] + max(CHUNK, grown)

    def _may_lie_beyond(self, p: int) -> bool:
        """Part `p` read all it wanted and found a moved unit within ``CHUNK`` of the end of
        what it read: its frontier may lie further."""
        return (self._want[p] == self._read_to[p]
                and self._f.furthest[p] >= self._read_to[p] - CHUNK)

    def probes(self) -> list[int]:
        """Once the budget stopped the walk short of a part's frontier: per such part, the
        next unit of a binary search for how far the job has reached (positions between the
        furthest unit seen moved and the part's end; the job reached every unit before the
        furthest one it reached), until it is known to within ``CHUNK`` units; [] when all
        are. Tell :meth:`probed` what the probed units showed."""
        f = self._f
        for p, units in enumerate(f.order):
            if self.truncated and p not in self._search and self._may_lie_beyond(p):
                self._search[p] = [f.furthest[p], len(units)]
        return [f.order[p][(lo + hi) // 2] for p, (lo, hi) in self._search.items()
                if hi - lo > CHUNK]

    def probed(self, units: Iterable[int], moved: Container[int]) -> None:
        """The units :meth:`probes` gave, read: those in `moved` the job has reached."""
        for unit in units:
            p, pos = self._f.position(unit)
            bounds = self._search[p]
            bounds[0 if unit in moved else 1] = pos
            self._f.furthest[p] = max(self._f.furthest[p], bounds[0])

    def reached(self) -> int:
        """About how many units the job has reached (to within ``CHUNK`` per part searched)."""
        return sum(furthest + 1 for furthest in self._f.furthest)

    def settle(self, finished: Callable[[int], bool]) -> None:
        """Mark settled the units this tick read that are `finished`; move each part's cursor
        to its first unit not settled; size the next tick's step by how far the frontier
        moved (at least ``CHUNK``)."""
        f = self._f
        for p, units in enumerate(f.order):
            f.settled.update(unit for unit in units[f.cursor[p]:self._read_to[p]]
                             if finished(unit))
            while f.cursor[p] < len(units) and units[f.cursor[p]] in f.settled:
                f.cursor[p] += 1
            f.step[p] = max(CHUNK, f.furthest[p] - self._start_furthest[p])
