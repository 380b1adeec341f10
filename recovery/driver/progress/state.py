"""What a run's progress readings add up to, on the driver: per unit its baseline and its
last reading, per dead-letter stream its baseline and last length; the totals, the finished
units and the lines of what changed. Pure: no I/O, no thread, no lock
(``recovery.driver.progress.reporter.ProgressReporter`` reads Redis, holds the lock and logs).

Counts are entries. Definitions, per unit (one stream and group), against the baseline:

- *done*: baseline pending minus pending now, at least 0 (acked or dead-lettered by the job,
  or acked by anyone else meanwhile; so dead-lettered entries are part of done). A unit
  whose stream or group vanished has nothing pending now: its baseline counts as done, and
  the totals line says how many vanished.
- *held by the job*: pending entries owned by this run's job consumers (claimed, not yet
  acked or dead-lettered; at the end of a run, the ones whose handler call failed).
- *still pending*: pending now, held by the job or not (not claimed yet, not idle enough to
  claim, or owned by a live consumer): the totals line shows it with the job's share, so it
  adds up with the unit lines' ``pending A -> B`` (``Totals.still_pending`` counts the part
  not held by the job).
- *dead-lettered*: growth of the dead-letter streams' lengths since the baseline, at least 0,
  counted once per dead-letter stream: the groups of one stream share its DLQ, so a unit line
  says so when its stream has more than one group. Entries others add to a dead-letter
  stream while its stream's PELs stand still are counted at the next reading that reads it
  (``recovery.driver.progress.reporter``: when a length is read again), if any.
- *finished*: the stream or group vanished, or the job holds none of the unit's entries now
  and either its PEL is below its baseline, or is empty, or the job was seen holding some of
  it at an earlier reading. Entries left pending on purpose (too fresh to claim, or owned by
  a live consumer) do not keep a unit from finishing; a live consumer's acks can make a unit
  read as finished before the job reaches it. "streams" in the lines count units: a stream
  with two groups counts twice.
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Sequence

from recovery.driver.discovery import WorkUnit
from recovery.driver.progress.lines import Totals, unit_line
from recovery.driver.progress.read import Reading, UnitState, stale_lengths, units_by_key
from recovery.report.wording import plural

MAX_STREAM_LINES = 20  # per-unit lines per reading


class ProgressState:
    """The progress of `units` (dead-letter key of each in `dlq`, None where it has none),
    reading by reading. Until the baseline, each unit's pending count is discovery's."""

    def __init__(self, units: Sequence[WorkUnit], dlq: Sequence[str | None]) -> None:
        self.units = list(units)
        self.dlq = list(dlq)
        self._units_of = units_by_key(self.dlq)
        self._groups_of = Counter(u.stream for u in self.units)
        self.base: list[int] = [u.pending for u in self.units]
        self._base_dead: dict[str, int | None] = {k: None for k in self.dlq if k}
        self.state: list[UnitState] = [UnitState(u.pending, 0) for u in self.units]
        self._dead: dict[str, int | None] = dict(self._base_dead)
        self._dead_marks: dict[str, tuple[object, ...]] = {}  # see lengths_to_read
        self._ever_held = [False] * len(self.units)
        self._seen_gone = [False] * len(self.units)

    def take_baseline(self, reading: Reading) -> list[str]:
        """Take `reading` as the baseline (a unit it could not read keeps discovery's
        count); the names of the units first seen vanished."""
        for i, state in enumerate(reading.units):
            if state is not None:
                self.base[i] = state.pending
                self.state[i] = state
        self._base_dead = dict(reading.dead)
        self._dead = dict(reading.dead)
        return self.note_gone()

    def apply(self, reading: Reading) -> tuple[list[str], list[str]]:
        """Take in a reading (keeping the last known numbers of what it could not read):
        the unit lines for what changed, largest change first, and the names of the units
        first seen vanished."""
        before, dead_before = list(self.state), dict(self._dead)
        for i, state in enumerate(reading.units):
            if state is not None:
                self.state[i] = state
                self._ever_held[i] = self._ever_held[i] or state.held > 0
        for key, length in reading.dead.items():
            if length is not None:
                self._dead[key] = length
                self._dead_marks[key] = tuple(self.state[i].mark for i in self._units_of[key])
                if self._base_dead.get(key) is None:
                    self._base_dead[key] = length
        return self._changed_lines(before, dead_before), self.note_gone()

    def lengths_to_read(self, indices: Sequence[int], states: Sequence[UnitState | None],
                        tick: bool) -> list[str]:
        """The dead-letter keys of the units at `indices` to read, given the `states` just
        read (``stale_lengths``: a unit not read now counts with its last reading, one that
        could not be read as changed); at a `tick`, none of units still :meth:`untouched`."""
        marks = [state.mark for state in self.state]
        for i in indices:
            marks[i] = getattr(states[i], "mark", None)  # None: not read
        keys = (self.dlq[i] for i in indices if not (tick and self.untouched(i, states[i])))
        return stale_lengths(keys, self._units_of, marks, self._dead_marks, self._dead)

    def untouched(self, i: int, state: UnitState | None) -> bool:
        """Unit `i`, read as `state`, is as at the baseline (as many pending, none ever held
        by the job), its dead-letter length known: the job moves entries only out of its
        holdings, acking them, so none came from it, unless as many were delivered anew
        (the final reading, not skipping, counts them)."""
        key = self.dlq[i]
        return self.as_at_start(i, state) and key is not None and self._dead.get(key) is not None

    def as_at_start(self, i: int, state: UnitState | None) -> bool:
        """Unit `i`, read as `state`, is as at the baseline: as many pending, none held by
        the job now or at an earlier reading (False when it could not be read, or vanished)."""
        return (state is not None and not state.gone and state.pending == self.base[i]
                and state.held == 0 and not self._ever_held[i])

    def finished(self, i: int) -> bool:
        """Whether unit `i` is finished (module doc) as last read."""
        state = self.state[i]
        if state.gone:
            return True
        return state.held == 0 and (state.pending < self.base[i] or state.pending == 0
                                    or self._ever_held[i])

    def note_gone(self) -> list[str]:
        """Names of the units first seen vanished at this reading."""
        names = []
        for i, state in enumerate(self.state):
            if state.gone and not self._seen_gone[i]:
                self._seen_gone[i] = True
                names.append(f"{self.units[i].stream} / {self.units[i].group}")
        return names

    def totals(self) -> Totals:
        """The run so far, from the last good reading of each unit (module doc)."""
        done = held = still = 0
        for base, state in zip(self.base, self.state, strict=True):
            done += max(0, base - state.pending)
            held += state.held
            still += max(0, state.pending - state.held)
        dead = sum(max(0, (self._dead.get(k) or 0) - (b or 0))
                   for k, b in self._base_dead.items() if b is not None)
        return Totals(at_start=sum(self.base), done=done, dead_lettered=dead, held=held,
                      still_pending=still,
                      finished=sum(self.finished(i) for i in range(len(self.units))),
                      units=len(self.units), vanished=sum(s.gone for s in self.state))

    def _changed_lines(self, before: list[UnitState], dead_before: dict[str, int | None]
                       ) -> list[str]:
        """The lines of the units that changed, largest change first (then by stream and
        group), at most ``MAX_STREAM_LINES`` and a count of the rest: only the lines logged
        are worded (a final reading of 100,000 units changes them all)."""
        changed: list[tuple[int, str, str, int, int]] = []
        for i, (unit, old, new) in enumerate(zip(self.units, before, self.state, strict=True)):
            dead_delta = _delta(self._dead, dead_before, self.dlq[i])
            size = (abs(new.pending - old.pending) + abs(new.held - old.held)
                    + abs(dead_delta) + (new.gone != old.gone))
            if size:
                changed.append((-size, unit.stream, unit.group, i, dead_delta))
        lines = [unit_line(self.units[i], before[i], self.state[i], dead_delta,
                           self._groups_of[self.units[i].stream], self.finished(i))
                 for *_, i, dead_delta in heapq.nsmallest(MAX_STREAM_LINES, changed)]
        if len(changed) > MAX_STREAM_LINES:
            more = len(changed) - MAX_STREAM_LINES
            lines.append(f"progress ... and {more:,} more {plural(more, 'stream')} changed")
        return lines


def _delta(now: dict[str, int | None], before: dict[str, int | None], key: str | None) -> int:
    """Growth of dead-letter stream `key` between two readings (0 if unknown)."""
    new, old = (now.get(key), before.get(key)) if key else (None, None)
    return new - old if new is not None and old is not None else 0
