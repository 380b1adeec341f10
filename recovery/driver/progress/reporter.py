"""Driver-side progress of a run, read from Redis itself while the Spark stages run.

Executors' logs are not visible on the driver, so the driver asks Redis: every
``report.progress_interval_s`` seconds a daemon thread reads work units' PEL summaries
(which units: below; ``XPENDING stream group``: how many entries are pending, how many of
them this run's job consumers ``<prefix>-<run id>-<part>`` hold), then the lengths of their
streams' dead-letter streams (``XLEN``), pipelined (``recovery.driver.progress.read``: a few
round trips per 1000 units, routed by key on a Redis Cluster). A dead-letter length is read
again only when a PEL summary of one of its stream's units changed since it was last read
(count, first and last ID, each consumer's count: the job moves entries to it only out of
those PELs), and a tick reads none for units still as at the baseline (as many pending, none
ever held by the job). It logs at INFO on ``recovery.driver.progress.reporter``:

- on entering, ``progress start: 1,000,000 pending entries in 1,000 streams; a progress line
  every 10 s``;
- one totals line per tick::

    progress 40 s: 312,000 of 1,000,000 pending entries done (31%), 5,400 dead-lettered,
    688,000 still pending (120,000 of them held by the job); 210 of 1,000 streams finished

  (one line; `` (3 vanished)`` appended when units vanished; on exit ``progress final 52 s:
  ...``, read once more (the PEL summaries as the consumer clean-up just read them, the
  dead-letter lengths that may have changed), or ``progress final 52 s (as of the reading at
  40 s): ...`` when that last read failed);
- then one line per unit that changed since the previous tick (its PEL size, the job's share
  of it, or its stream's DLQ length), largest change first, at most 20 per tick
  (``recovery.driver.progress.state.MAX_STREAM_LINES``), then ``progress ... and N more
  streams changed``::

    progress orders / workers: pending 1,000 -> 400 (job holds 300), dead-lettered +12
    progress orders / workers: pending 400 -> 380 (job holds 0), finished
    progress orders / audit: gone (stream or group deleted), counted as finished

  ``A -> B``: PEL size at the previous tick and now; ``job holds``: now; ``dead-lettered +N``:
  growth of the stream's DLQ since the previous tick (omitted when 0; followed by `` (the
  stream's DLQ, shared by its 2 groups)`` when the run has several groups of that stream).

Given the order each part takes its units in (a run gives it), a tick reads, per part, its
units not finished yet up to a little beyond the furthest one the job has reached
(``recovery.driver.progress.frontier``): units beyond it are as at the baseline, so a tick
costs about the units the job reached since the previous one. Without that order, a tick
reads every unit on runs of at most ``UNITS_PER_TICK`` units, else that many of the units
not finished yet, round robin. Either way a tick reads at most ``UNITS_PER_TICK`` units, so
its cost does not grow with the number of streams (and does not take the CPU from the
pass); when that limit leaves unfinished units unread, they keep the numbers of their last
reading and the totals line says so after its time, ``progress 10 s (read 5,000 of 95,000
unfinished streams, the others as last read): ...`` (its totals then lag behind the run).
Along the frontiers it then also says about how far the job has gone, found in a binary
search of a few PEL summaries per part: ``(read 5,000 of 90,000 unfinished streams, the
others as last read; the job has reached about 61,000 of 100,000): ...``.
The final reading covers every unit: in a run, each unit's PEL summary comes from
the consumer clean-up, which reads it once per group anyway, inside the same script that
deletes the job's empty consumers (``ProgressReporter.take_final_summaries``).

Counts are entries; times are seconds since the reporter started. What *done*, *held by
the job*, *still pending*, *dead-lettered* and *finished* mean, per unit against a baseline
taken when the reporter starts (the group health read just before, when the job passes it;
else a reading of its own): ``recovery.driver.progress.state``, which adds the readings up.

A failed read never breaks the run: at most one WARNING per tick (the whole read failed, or
some units or dead-letter keys could not be read: their last known numbers are kept; a unit
that vanished is named once). Only stream, group and key names and numbers are logged.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping, Sequence
from functools import partial
from types import TracebackType
from typing import NamedTuple

from recovery.driver.discovery import WorkUnit, job_consumer_stem
from recovery.driver.progress.frontier import Frontier
from recovery.driver.progress.lines import Totals, totals_line
from recovery.driver.progress.read import (
    Reading,
    UnitState,
    dead_letter_keys,
    health_reading,
    merged,
    read_progress,
)
from recovery.driver.progress.state import ProgressState
from recovery.errors import RecoveryError
from recovery.redis_io.dlq_names import DeadLetterNames
from recovery.redis_io.redis_conn import RedisConn
from recovery.report.wording import plural, some_names
from recovery.rows import HealthRow

log = logging.getLogger(__package__)  # "recovery.driver.progress"
UNITS_PER_TICK = 5_000  # units a tick reads at most (the final reading reads all)
JOIN_TIMEOUT_S = 0.5  # how long exit waits for a tick in flight (e.g. a read of a hung Redis)


class Partial(NamedTuple):
    """A tick that read only some of the unfinished units: how many it read, how many were
    unfinished (as last read), and about how many units the job has reached (None: not
    known, as without the parts' order)."""

    read: int
    unfinished: int
    reached: int | None = None

    def words(self, units: int) -> str:
        """What the totals line says after its time, of a run of `units` units."""
        reached = "" if self.reached is None else (
            f"; the job has reached about {self.reached:,} of {units:,}")
        return (f" (read {self.read:,} of {self.unfinished:,} unfinished streams, the others"
                f" as last read{reached})")


# A reading (None: it failed), why it failed, and what it left unread (None: nothing).
Outcome = tuple[Reading | None, str, Partial | None]


class ProgressReporter:
    """Logs a run's progress every `interval_s` seconds while the ``with`` block runs.

    ``with ProgressReporter(conn, units, dlq_names, consumer_prefix, run_id, interval_s):
    run_the_stages()``. `conn` from ``recovery.redis_io.redis_conn.RedisConn.open`` (raw
    XPENDING replies; standalone or cluster; thread-safe, so the driver may go on using it;
    its params word the error messages); `units` from ``recovery.driver.discovery.discover``;
    `health`, the group health rows read just before (``recovery.driver.health
    .collect_health``), is the baseline when given, else entering reads one. Entering takes
    the baseline and starts a daemon thread; leaving stops it at once (an Event), reads once
    more and logs the final totals. `interval_s` <= 0, or no units: nothing is read or logged
    and no thread starts. Never raises for Redis trouble (see the module doc). `order`: per
    part, the indices into `units` of its units in the order the part takes them
    (``recovery.driver.progress.frontier.parts_order``); without it ticks read round robin.

    The final reading takes the PEL summaries the job's consumer clean-up read just before
    (``take_final_summaries``), and reads itself the dead-letter lengths and every unit it was
    given no usable summary for (all when the block ends before the clean-up, on an error).
    """

    def __init__(self, conn: RedisConn, units: Sequence[WorkUnit], dlq_names: DeadLetterNames,
                 consumer_prefix: str, run_id: str, interval_s: float,
                 health: Sequence[HealthRow] | None = None,
                 order: Sequence[Sequence[int]] | None = None) -> None:
        self._conn = conn
        self._health = health
        self._interval_s = interval_s
        self._stem = job_consumer_stem(consumer_prefix, run_id)
        self._progress = ProgressState(units, dead_letter_keys(units, dlq_names))
        self._units, self._dlq = self._progress.units, self._progress.dlq  # the state's own
        self._stop = threading.Event()
        self._lock = threading.RLock()
        self._thread: threading.Thread | None = None
        self._closed = False
        self._started = time.monotonic()
        self._last_read_s = 0.0
        self._next = 0  # where the next round robin reading starts
        self._frontier = Frontier(order) if order is not None else None
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
                self._warn(self._progress.take_baseline(reading), reading.errors)
        count = len(self._units)
        log.info("progress start: %s pending entries in %s %s; a progress line every %g s",
                 f"{sum(self._progress.base):,}", f"{count:,}", plural(count, "stream"),
                 self._interval_s)

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
        reading, failure, some = self._reading(final)
        with self._lock:
            if self._closed or (self._stop.is_set() and not final):
                return None
            elapsed = f"{time.monotonic() - self._started:.0f} s"
            label = f"final {elapsed}" if final else elapsed
            if some is not None:
                label += some.words(len(self._units))
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

    def _reading(self, final: bool) -> Outcome:
        """This report's reading: the final one reads every unit (taking the clean-up's
        summaries), a tick along the parts' frontiers when it knows them, else round robin."""
        if final:
            return *self._read(None, self._final_summaries), None
        if self._frontier is not None:
            return self._frontier_reading(self._frontier)
        return self._round_robin_reading()

    def _round_robin_reading(self) -> Outcome:
        """A tick's reading without the parts' order: all units on runs of at most
        ``UNITS_PER_TICK`` units, else the next ``UNITS_PER_TICK`` not finished yet, round
        robin. Also (units read, units unfinished as last read) when that is not all of them."""
        n = len(self._units)
        if n <= UNITS_PER_TICK:
            return *self._read(None, tick=True), None
        with self._lock:
            order = [(self._next + k) % n for k in range(n)]
            unfinished = [i for i in order if not self._progress.finished(i)]
            picked = unfinished[:UNITS_PER_TICK]
            if picked:
                self._next = (picked[-1] + 1) % n
        some = Partial(len(picked), len(unfinished)) if len(picked) < len(unfinished) else None
        return *self._read(picked, tick=True), some

    def _frontier_reading(self, frontier: Frontier) -> Outcome:
        """A tick's reading along the parts' frontiers (``recovery.driver.progress.frontier``),
        at most ``UNITS_PER_TICK`` units, in as many pipelined reads as it takes to find them.
        Also (units read, units unfinished as last read) when the limit stopped it short."""
        with self._lock:
            walk = frontier.walk(self._progress.finished)
            unfinished = sum(not self._progress.finished(i) for i in range(len(self._units)))
        reading = Reading([None] * len(self._units), {}, [])
        read = 0
        while units := walk.next_units(UNITS_PER_TICK - read):
            more, failure = self._read(units, tick=True)
            if more is None:
                return None, failure, None
            reading, read = merged(reading, more), read + len(units)
            with self._lock:
                walk.saw(self._moved(units, more))
        if not walk.truncated:
            return reading, "", None
        while units := walk.probes():  # how far the job has gone beyond what was read
            found, _ = self._read(units, tick=True, lengths=False)
            if found is None:
                break
            with self._lock:
                walk.probed(units, set(self._moved(units, found)))
        return reading, "", Partial(read, unfinished, walk.reached())

    def _moved(self, units: Sequence[int], reading: Reading) -> list[int]:
        """Of `units`, those `reading` shows the job (or anyone) has moved since the baseline."""
        return [i for i in units if not self._progress.as_at_start(i, reading.units[i])]

    def _read(self, picked: list[int] | None = None,
              known: Mapping[tuple[str, str], object] | None = None, tick: bool = False,
              lengths: bool = True) -> tuple[Reading | None, str]:
        """One reading of the `picked` units (all when None; the others read as None: last
        known numbers kept; `known` summaries not read again: ``read_progress``), or None
        and why (a one-line error naming host:port, never secrets). A `tick` reads no
        dead-letter length for units still as at the baseline (``_lengths_for``); without
        `lengths`, none at all."""
        lengths_for = partial(self._lengths_for, picked, tick) if lengths else _no_lengths
        try:
            with self._conn.errors():
                return read_progress(self._conn.client, self._units, self._dlq, self._stem,
                                     picked, known, lengths_for), ""
        except RecoveryError as error:
            return None, str(error)
        except Exception as error:  # anything else a client can raise: report, go on
            return None, type(error).__name__

    def _lengths_for(self, picked: Sequence[int] | None, tick: bool,
                     states: Sequence[UnitState | None]) -> list[str]:
        """The dead-letter keys of the `picked` units (all when None) to read, given the
        `states` just read (``ProgressState.lengths_to_read``)."""
        indices = range(len(self._units)) if picked is None else picked
        with self._lock:
            return self._progress.lengths_to_read(indices, states, tick)

    def _apply(self, reading: Reading) -> list[str]:
        """Take in a reading; the unit lines for what changed; one warning if needed."""
        lines, vanished = self._progress.apply(reading)
        self._last_read_s = time.monotonic() - self._started
        self._warn(vanished, reading.errors)
        return lines

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

    def totals(self) -> Totals:
        """The run so far, from the last good reading of each unit
        (``recovery.driver.progress.state``)."""
        with self._lock:
            return self._progress.totals()


def _no_lengths(states: Sequence[UnitState | None]) -> list[str]:
    """Read no dead-letter length (a probe of the frontier needs only PEL summaries)."""
    return []
