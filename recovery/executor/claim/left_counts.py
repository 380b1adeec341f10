"""The last PEL read of each unit for its histogram, in the one pass: after the unit's steps
are all handed over, pipelined across the units that finished meanwhile.

The claim loop counts each step's PEL rows as it reads them; what the loop leaves (rows
other consumers own) is read once more when the unit is done. With small steps gathered
into one hand-over (``recovery.executor.claim.gather``), a unit's claim loop ends before its
entries are handed over. Read then, the PEL would still hold them (rows of the job's own
consumer, read only to be dropped). So the read waits until the hand-over of the unit's
last step, and the units done by then are read in one pipeline.

By then an entry the run claimed may be another consumer's row: one the hand-over reassigned,
and one it left pending (failed, skipped, held: still the job consumer's, or no longer, when
a live consumer claimed it between the job's claim and this read). Its claim step counted it
as found, so each hand-over's entries that stay pending are noted first
(``PelHistogram.kept``) and the read skips them, whoever owns them by then: each row of the
PEL as found is counted once. Only the entries a hand-over took out of the PEL
(:func:`gone_actions`) are not noted: a PEL row cannot come back for them.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from recovery.executor.claim.loop import ClaimStep, left_reads
from recovery.executor.histogram import PelHistogram
from recovery.params import Unit
from recovery.redis_io.redis_conn import RedisConn
from recovery.schemas import Action


def gone_actions(mode_done: str, stays_pending: bool) -> tuple[str, ...]:
    """The actions after which an entry is no longer pending in its group (``GONE``): acked
    (XACK, whoever owned it by then), moved to its dead-letter stream, or re-processed by a
    mode that takes it out of the PEL (`mode_done`, the mode's action, unless the mode's
    entries stay pending: `stays_pending`, as reassign's). Every other action leaves it
    pending."""
    gone = (Action.REPROCESSED.value, Action.DEAD_LETTERED.value)
    return gone if stays_pending or mode_done in gone else (*gone, mode_done)


class LeftCounts:
    """Which units' claim loops are over, and which of their steps were handed over.

    Steps are counted as they are pulled from the claim loops (``tracked``) and as joined
    steps go to the hand-over (``sent``); ``handed`` follows each hand-over's report (one
    per joined step, in order) and reads the PELs of the units whose last step it covered.
    """

    def __init__(self, gone: Sequence[str]) -> None:
        """`gone`: the actions after which an entry is out of the PEL (:func:`gone_actions`)."""
        self._gone = pa.array(list(gone), pa.string())
        self._pulled = 0  # claim steps pulled from the units' loops
        self._handed = 0  # claim steps whose hand-over is done
        self._in_flight: deque[int] = deque()  # claim steps per joined step sent
        self._waiting: list[tuple[Unit, PelHistogram, int]] = []  # unit, its last step
        self._pels: dict[tuple[str, str], PelHistogram] = {}  # the tracked units' histograms

    def tracked(self, unit: Unit, histogram: PelHistogram, steps: Iterable[ClaimStep],
                shared: bool = False) -> Iterator[ClaimStep]:
        """`steps` of `unit`, counted; once they end the unit waits for its read (unless
        its claim already counted what it left: ``PelHistogram.left_counted``, or it is a
        part of a split unit, `shared`: the driver reads what the parts left, skipping the
        entries noted in ``PelHistogram.kept``, which its row carries)."""
        self._pels[(unit.stream, unit.group)] = histogram
        for step in steps:
            self._pulled += 1
            yield step
        if not histogram.left_counted and not shared:
            self._waiting.append((unit, histogram, self._pulled))

    def sent(self, steps: Iterable[ClaimStep]) -> Iterator[ClaimStep]:
        """Joined `steps` on their way to the hand-over, counted."""
        for step in steps:
            self._in_flight.append(step.joins)
            yield step

    def handed(self, conn: RedisConn, report: pa.RecordBatch) -> None:
        """One hand-over is done (`report`: its REPORT batch): note the entries it left
        pending, then read the PELs of the units it finished."""
        self._note_kept(report)
        self._handed += self._in_flight.popleft()
        self._read(conn, self._handed)

    def _note_kept(self, report: pa.RecordBatch) -> None:
        """Add the IDs of `report`'s entries still pending (an action not in `gone`) to
        their units' ``PelHistogram.kept`` (not for a unit whose claim counted what it left
        before any hand-over)."""
        actions = report.column("action")
        pending = pc.invert(pc.is_in(actions, value_set=self._gone.cast(actions.type)))
        if not pc.any(pending).as_py():
            return
        rows = report.filter(pending).select(["stream", "group", "id"]).to_pylist()
        for row in rows:
            pel = self._pels.get((row["stream"], row["group"]))
            if pel is not None and not pel.left_counted:
                pel.kept.add(row["id"])

    def rest(self, conn: RedisConn) -> None:
        """Every hand-over is done: read the PELs of the units still waiting."""
        self._read(conn, self._pulled)

    def _read(self, conn: RedisConn, handed: int) -> None:
        """Read the PELs of the waiting units whose last step is among the first `handed`
        (units finish in order, so they are a prefix of the waiting list)."""
        n = 0
        while n < len(self._waiting) and self._waiting[n][2] <= handed:
            n += 1
        if n:
            ready, self._waiting = self._waiting[:n], self._waiting[n:]
            left_reads(conn, [(unit, pel) for unit, pel, _ in ready])
