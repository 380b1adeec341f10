"""The wording of the driver's progress log lines (:mod:`.reporter` decides when a line is
logged and with what numbers; its module doc shows the lines)."""

from __future__ import annotations

from dataclasses import dataclass

from recovery.driver.discovery import WorkUnit
from recovery.driver.progress.read import UnitState


@dataclass(frozen=True)
class Totals:
    """The run so far, in entries (``at_start``: pending in all units at the baseline) and
    units (``finished``, ``vanished`` of ``units``)."""

    at_start: int
    done: int
    dead_lettered: int
    held: int
    still_pending: int
    finished: int
    units: int
    vanished: int


def totals_line(label: str, totals: Totals) -> str:
    """``progress <label>: D of S pending entries done (P%), X dead-lettered, N still pending
    (H of them held by the job); F of U streams finished``: N is every entry pending now in
    the run's units, as the unit lines' ``pending A -> B`` add up (D + N = S while nothing
    new arrives), H the share of it this run's consumers hold."""
    t = totals
    percent = t.done * 100 // t.at_start if t.at_start else 100
    line = (f"progress {label}: {t.done:,} of {t.at_start:,} pending entries done ({percent}%), "
            f"{t.dead_lettered:,} dead-lettered, {t.held + t.still_pending:,} still pending "
            f"({t.held:,} of them held by the job); {t.finished:,} of {t.units:,} streams "
            "finished")
    return line + (f" ({t.vanished:,} vanished)" if t.vanished else "")


def unit_line(unit: WorkUnit, before: UnitState, now: UnitState, dead_delta: int,
              groups_of_stream: int, finished: bool) -> str:
    """``progress <stream> / <group>: pending A -> B (job holds H)[, dead-lettered +N]
    [, finished]``: A at the previous tick, B and H now, N the growth of the stream's DLQ
    since the previous tick."""
    name = f"progress {unit.stream} / {unit.group}"
    if now.gone:
        return f"{name}: gone (stream or group deleted), counted as finished"
    line = f"{name}: pending {before.pending:,} -> {now.pending:,} (job holds {now.held:,})"
    if dead_delta:
        line += f", dead-lettered {dead_delta:+,}"
        if groups_of_stream > 1:
            line += f" (the stream's DLQ, shared by its {groups_of_stream} groups)"
    return line + (", finished" if finished else "")
