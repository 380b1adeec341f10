"""Driver-side progress of a run, read from Redis itself while the Spark stages run.

Executors' logs are not visible on the driver, so the driver asks Redis: every
``report.progress_interval_s`` seconds a daemon thread reads each work unit's PEL summary
(``XPENDING stream group``: how many entries are pending, how many of them this run's job
consumers ``<prefix>-<run id>-<part>`` hold), then the length of the stream's dead-letter
stream (``XLEN``), pipelined (``recovery.driver.progress_read``: a few round trips per 1000
units, routed by key on a Redis Cluster). A dead-letter length is read again only when a PEL
summary of one of its stream's units changed since it was last read (count, first and last
ID, each consumer's count: the job moves entries to it only out of those PELs), and a tick
skips the units still as at the baseline (as many pending, none ever held by the job).
It logs at INFO on ``recovery.driver.progress``:

- on entering, ``progress start: 1,000,000 pending entries in 1,000 streams; a progress line
  every 10 s``;
- one totals line per tick::

    progress 40 s: 312,000 of 1,000,000 pending entries done (31%), 5,400 dead-lettered,
    120,000 held by the job, 688,000 still pending; 210 of 1,000 streams finished

  (one line; `` (3 vanished)`` appended when units vanished; on exit ``progress final 52 s:
  ...``, read once more (the PEL summaries as the consumer clean-up just read them, the
  dead-letter lengths that may have changed), or ``progress final 52 s (as of the reading at
  40 s): ...`` when that last read failed);
- then one line per unit that changed since the previous tick (its PEL size, the job's share
  of it, or its stream's DLQ length), largest change first, at most ``MAX_STREAM_LINES`` per
  tick, then ``progress ... and N more streams changed``::

    progress orders / workers: pending 1,000 -> 400 (job holds 300), dead-lettered +12
    progress orders / workers: pending 400 -> 380 (job holds 0), finished
    progress orders / audit: gone (stream or group deleted), counted as finished

  ``A -> B``: PEL size at the previous tick and now; ``job holds``: now; ``dead-lettered +N``:
  growth of the stream's DLQ since the previous tick (omitted when 0; followed by `` (the
  stream's DLQ, shared by its 2 groups)`` when the run has several groups of that stream).

On runs of more than ``UNITS_PER_TICK`` units, a tick reads only that many of the units not
finished yet, round robin, so a tick's cost does not grow with the number of streams (and
does not take the CPU from the pass): the other units keep the numbers of their last
reading, and the totals line says so after its time, ``progress 10 s (read 5,000 of 95,000
unfinished streams, the others as last read): ...`` (its totals then lag behind the run).
The final reading covers every unit: in a run, each unit's PEL summary comes from
the consumer clean-up, which reads it once per group anyway, inside the same script that
deletes the job's empty consumers (``ProgressReporter.take_final_summaries``).

Counts are entries; times are seconds since the reporter started. Definitions, per unit
(one stream and group), against a baseline taken when the reporter starts (the group health
read just before, when the job passes it; else a reading of its own):

- *done*: baseline pending minus pending now, at least 0 (acked or dead-lettered by the job,
  or acked by anyone else meanwhile; so dead-lettered entries are part of done). A unit
  whose stream or group vanished has nothing pending now: its baseline counts as done, and
  the totals line says how many vanished.
- *held by the job*: pending entries owned by this run's job consumers (claimed, not yet
  acked or dead-lettered; at the end of a run, the ones whose handler call failed).
- *still pending*: pending now and not held by the job (not claimed yet, not idle enough to
  claim, or owned by a live consumer).
- *dead-lettered*: growth of the dead-letter streams' lengths since the baseline, at least 0,
  counted once per dead-letter stream: the groups of one stream share its DLQ, so a unit line
  says so when its stream has more than one group. Entries others add to a dead-letter
  stream while its stream's PELs stand still are counted at the next reading that reads it
  (see above), if any.
- *finished*: the stream or group vanished, or the job holds none of the unit's entries now
  and either its PEL is below its baseline, or is empty, or the job was seen holding some of
  it at an earlier tick. Entries left pending on purpose (too fresh to claim, or owned by a
  live consumer) do not keep a unit from finishing; a live consumer's acks can make a unit
  read as finished before the job reaches it. "streams" in the lines count units: a stream
  with two groups counts twice.

A failed read never breaks the run: at most one WARNING per tick (the whole read failed, or
some units or dead-letter keys could not be read: their last known numbers are kept; a unit
that vanished is named once). Only stream, group and key names and numbers are logged.
"""

from __future__ import annotations

import heapq
import logging
import threading
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from functools import partial
from types import TracebackType
from typing import Any

import redis

from recovery.driver.discovery import WorkUnit, job_consumer_stem
from recovery.driver.progress_lines import Totals, plural, some_names, totals_line, unit_line
from recovery.driver.progress_read import (
    Reading,
    UnitState,
    dead_letter_keys,
    health_reading,
    read_progress,
    stale_lengths,
    units_by_key,
)
from recovery.errors import RecoveryError
from recovery.params import RedisParams
from recovery.redis_io.redis_conn import redis_errors

log = logging.getLogger(__name__)
MAX_STREAM_LINES = 20  # per-unit lines per tick
UNITS_PER_TICK = 5_000  # units a tick reads at most (the final reading reads all)
JOIN_TIMEOUT_S = 0.5  # how long exit waits for a tick in flight (e.g. a read of a hung Redis)


class ProgressReporter:
    """Logs a run's progress every `interval_s` seconds while the ``with`` block runs.

    ``with ProgressReporter(client, units, dlq_suffix, consumer_prefix, run_id, interval_s,
    params): run_the_stages()``. `client` from ``recovery.redis_io.redis_conn.connect`` (raw
    XPENDING replies; standalone or cluster; thread-safe, so the driver may go on using it);
    `units` from ``recovery.driver.discovery.discover``; `params` only words error messages;
    `health`, the group health rows read just before (``recovery.driver.health
    .collect_health``), is the baseline when given, else entering reads one. Entering takes
    the baseline and starts a daemon thread; leaving stops it at once (an Event), reads once
    more and logs the final totals. `interval_s` <= 0, or no units: nothing is read or logged
    and no thread starts. Never raises for Redis trouble (see the module doc).

    The final reading takes the PEL summaries the job's consumer clean-up read just before
    (``take_final_summaries``), and reads itself the dead-letter lengths and every unit it was
    given no usable summary for (all when the block ends before the clean-up, on an error).
    """

    def __init__(self, client: redis.Redis, units: Sequence[WorkUnit], dlq_suffix: str,
                 consumer_prefix: str, run_id: str, interval_s: float,
                 params: RedisParams, health: Sequence[dict[str, Any]] | None = None) -> None:
        self._client = client
        self._health = health
        self._units = list(units)
        self._interval_s = interval_s
        self._params = params
        self._stem = job_consumer_stem(consumer_prefix, run_id)
        self._dlq = dead_letter_keys(self._units, dlq_suffix)
        self._units_of = units_by_key(self._dlq)
        self._dead_marks: dict[str, tuple[object, ...]] = {}  # see _lengths_for
        self._groups_of = Counter(u.stream for u in self._units)
        self._stop = threading.Event()
        self._lock = threading.RLock()
        self._thread: threading.Thread | None = None
        self._closed = False
        self._started = time.monotonic()
        self._last_read_s = 0.0
        self._base: list[int] = [u.pending for u in self._units]
        self._base_dead: dict[str, int | None] = {k: None for k in self._dlq if k}
        self._state: list[UnitState] = [UnitState(u.pending, 0) for u in self._units]
        self._dead: dict[str, int | None] = dict(self._base_dead)
        self._ever_held = [False] * len(self._units)
        self._seen_gone = [False] * len(self._units)
        self._next = 0  # where the next partial reading starts (see _picked)
        self._final_summaries: dict[tuple[str, str], object] = {}

    @property
    def enabled(self) -> bool:
        """True when the reporter reads and logs (an interval above 0, some units)."""
        return self._interval_s > 0 and bool(self._units)

    @property
    def running(self) -> bool:
        """True while the reporting thread is alive (after exit only if a read of a hung
        Redis is still in flight: it then ends without logging)."""
        return self._thread is not None and self._thread.is_alive()

    def take_final_summaries(self, summaries: Mapping[tuple[str, str], object]) -> None:
        """Let the final reading use `summaries` (by (stream, group): a raw ``XPENDING stream
        group`` reply or the error answered instead, as ``discovery.CleanUp`` holds them, read
        just now) instead of reading those units again. A disabled reporter ignores them."""
        self._final_summaries = dict(summaries)

    def __enter__(self) -> ProgressReporter:
        if not self.enabled:
            return self
        self._started = time.monotonic()
        self._take_baseline()
        self._thread = threading.Thread(target=self._loop, name="recovery-progress",
                                         daemon=True)
        self._thread.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._thread is None or self._stop.is_set():
            return
        self._stop.set()
        self._thread.join(JOIN_TIMEOUT_S)
        try:
            self.report(final=True)
        except Exception as error:  # a bug here must not hide the run's own outcome
            log.warning("progress: final report failed (%s)", type(error).__name__)

    def _take_baseline(self) -> None:
        """Per unit the PEL size now (the discovery count if unreadable), per dead-letter
        stream its length (unknown until the first reading that can see it): from the
        group health when the reporter was given it, else read now."""
        reading, failure = ((health_reading(self._units, self._health, self._dlq, self._stem), "")
                            if self._health is not None else self._read())
        with self._lock:
            if reading is None:
                log.warning("progress: no baseline (%s); using the pending counts of "
                            "discovery", failure)
            else:
                for i, state in enumerate(reading.units):
                    if state is not None:
                        self._base[i] = state.pending
                        self._state[i] = state
                self._base_dead = dict(reading.dead)
                self._dead = dict(reading.dead)
                self._warn(self._note_gone(), reading.errors)
        count = len(self._units)
        log.info("progress start: %s pending entries in %s %s; a progress line every %g s",
                 f"{sum(self._base):,}", f"{count:,}", plural(count, "stream"), self._interval_s)

    def _loop(self) -> None:
        while not self._stop.wait(self._interval_s):
            try:
                self.report()
            except Exception as error:  # never let a bug end the thread silently
                log.warning("progress: report failed (%s)", type(error).__name__)

    def report(self, final: bool = False) -> Totals | None:
        """Read Redis once and log the totals line and the lines of the units that changed
        since the previous report; the run's totals, or None when nothing was logged (the
        read failed, or the reporter is already closed). `final` logs the final totals line
        (from the last good reading if this one failed) and closes the reporter."""
        if self._closed:
            return None
        with self._lock:
            picked, unfinished = self._picked(final)
        reading, failure = self._read(picked, self._final_summaries if final else None,
                                      tick=not final)
        with self._lock:
            if self._closed or (self._stop.is_set() and not final):
                return None
            elapsed = f"{time.monotonic() - self._started:.0f} s"
            label = f"final {elapsed}" if final else elapsed
            if picked is not None and len(picked) < unfinished:
                label += (f" (read {len(picked):,} of {unfinished:,} unfinished streams, "
                          "the others as last read)")
            lines: list[str] = []
            if reading is None:
                log.warning("progress: cannot read Redis (%s)%s", failure,
                            "" if final else "; trying again at the next tick")
                label += f" (as of the reading at {self._last_read_s:.0f} s)"
            else:
                lines = self._apply(reading)
            self._closed = final
            if reading is None and not final:
                return None
            totals = self.totals()
            log.info("%s", totals_line(label, totals))
            for line in lines:
                log.info("%s", line)
            return totals

    def _picked(self, final: bool) -> tuple[list[int] | None, int]:
        """The units a reading covers, by index: all (None) for the final reading and on runs
        of at most ``UNITS_PER_TICK`` units; else the next ``UNITS_PER_TICK`` units not
        finished yet, round robin. Also how many units were not finished (as last read)."""
        n = len(self._units)
        if final or n <= UNITS_PER_TICK:
            return None, 0
        order = [(self._next + k) % n for k in range(n)]
        unfinished = [i for i in order if not self._finished(i)]
        picked = unfinished[:UNITS_PER_TICK]
        if picked:
            self._next = (picked[-1] + 1) % n
        return picked, len(unfinished)

    def _read(self, picked: list[int] | None = None,
              known: Mapping[tuple[str, str], object] | None = None, tick: bool = False
              ) -> tuple[Reading | None, str]:
        """One reading of the `picked` units (all when None; the others read as None: last
        known numbers kept; `known` summaries not read again: ``read_progress``), or None
        and why (a one-line error naming host:port, never secrets). A `tick` reads no
        dead-letter length for units still as at the baseline (``_lengths_for``)."""
        try:
            with redis_errors(self._params):
                return read_progress(self._client, self._units, self._dlq, self._stem,
                                     picked, known, partial(self._lengths_for, picked, tick)), ""
        except RecoveryError as error:
            return None, str(error)
        except Exception as error:  # anything else a client can raise: report, go on
            return None, type(error).__name__

    def _lengths_for(self, picked: Sequence[int] | None, tick: bool,
                     states: Sequence[UnitState | None]) -> list[str]:
        """The dead-letter keys of the `picked` units (all when None) to read, given the
        `states` just read: ``stale_lengths`` (a unit not read now counts with its last
        reading, one that could not be read as changed), at a `tick` not :meth:`_untouched`."""
        indices = range(len(self._units)) if picked is None else picked
        with self._lock:
            marks = [state.mark for state in self._state]
            for i in indices:
                marks[i] = getattr(states[i], "mark", None)  # None: not read
            keys = (self._dlq[i] for i in indices if not (tick and self._untouched(i, states[i])))
            return stale_lengths(keys, self._units_of, marks, self._dead_marks, self._dead)

    def _untouched(self, i: int, state: UnitState | None) -> bool:
        """Unit `i`, read as `state`, is as at the baseline (module doc), its dead-letter length
        known: the job moves entries only out of its holdings, acking them, so none came from
        it, unless as many were delivered anew (the final reading, not skipping, counts them)."""
        key = self._dlq[i]
        return (state is not None and not state.gone and state.pending == self._base[i]
                and state.held == 0 and not self._ever_held[i]
                and key is not None and self._dead.get(key) is not None)

    def _apply(self, reading: Reading) -> list[str]:
        """Take in a reading (keeping the last known numbers of what it could not read);
        the unit lines for what changed, largest change first; one warning if needed."""
        before, dead_before = list(self._state), dict(self._dead)
        for i, state in enumerate(reading.units):
            if state is not None:
                self._state[i] = state
                self._ever_held[i] = self._ever_held[i] or state.held > 0
        for key, length in reading.dead.items():
            if length is not None:
                self._dead[key] = length
                self._dead_marks[key] = tuple(self._state[i].mark for i in self._units_of[key])
                if self._base_dead.get(key) is None:
                    self._base_dead[key] = length
        self._last_read_s = time.monotonic() - self._started
        self._warn(self._note_gone(), reading.errors)
        return self._changed_lines(before, dead_before)

    def _changed_lines(self, before: list[UnitState], dead_before: dict[str, int | None]
                       ) -> list[str]:
        """The lines of the units that changed, largest change first (then by stream and
        group), at most ``MAX_STREAM_LINES`` and a count of the rest: only the lines logged
        are worded (a final reading of 100,000 units changes them all)."""
        changed: list[tuple[int, str, str, int, int]] = []
        for i, (unit, old, new) in enumerate(zip(self._units, before, self._state,
                                                 strict=True)):
            dead_delta = _delta(self._dead, dead_before, self._dlq[i])
            size = (abs(new.pending - old.pending) + abs(new.held - old.held)
                    + abs(dead_delta) + (new.gone != old.gone))
            if size:
                changed.append((-size, unit.stream, unit.group, i, dead_delta))
        lines = [unit_line(self._units[i], before[i], self._state[i], dead_delta,
                           self._groups_of[self._units[i].stream], self._finished(i))
                 for *_, i, dead_delta in heapq.nsmallest(MAX_STREAM_LINES, changed)]
        if len(changed) > MAX_STREAM_LINES:
            more = len(changed) - MAX_STREAM_LINES
            lines.append(f"progress ... and {more:,} more {plural(more, 'stream')} changed")
        return lines

    def _note_gone(self) -> list[str]:
        """Names of the units first seen vanished at this reading."""
        names = []
        for i, state in enumerate(self._state):
            if state.gone and not self._seen_gone[i]:
                self._seen_gone[i] = True
                names.append(f"{self._units[i].stream} / {self._units[i].group}")
        return names

    def _warn(self, vanished: list[str], errors: list[str]) -> None:
        """At most one warning: units that vanished, then what could not be read."""
        parts = []
        if vanished:
            parts.append(f"{len(vanished):,} vanished (stream or group deleted; counted as "
                         f"finished): {some_names(vanished)}")
        if errors:
            parts.append(f"{len(errors):,} could not be read (last known numbers kept): "
                         f"{some_names(errors)}")
        if parts:
            log.warning("progress: %s", "; ".join(parts))

    def _finished(self, i: int) -> bool:
        state = self._state[i]
        if state.gone:
            return True
        return state.held == 0 and (state.pending < self._base[i] or state.pending == 0
                                    or self._ever_held[i])

    def totals(self) -> Totals:
        """The run so far, from the last good reading of each unit (see the module doc)."""
        with self._lock:
            return self._totals()

    def _totals(self) -> Totals:
        done = held = still = 0
        for base, state in zip(self._base, self._state, strict=True):
            done += max(0, base - state.pending)
            held += state.held
            still += max(0, state.pending - state.held)
        dead = sum(max(0, (self._dead.get(k) or 0) - (b or 0))
                   for k, b in self._base_dead.items() if b is not None)
        return Totals(at_start=sum(self._base), done=done, dead_lettered=dead, held=held,
                      still_pending=still,
                      finished=sum(self._finished(i) for i in range(len(self._units))),
                      units=len(self._units), vanished=sum(s.gone for s in self._state))


def _delta(now: dict[str, int | None], before: dict[str, int | None], key: str | None) -> int:
    """Growth of dead-letter stream `key` between two readings (0 if unknown)."""
    new, old = (now.get(key), before.get(key)) if key else (None, None)
    return new - old if new is not None and old is not None else 0
