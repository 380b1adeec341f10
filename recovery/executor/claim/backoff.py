"""The claim's backoff schedule (``claim.backoff_factor``): when a pending entry is due, and
the entries not due yet, counted per unit. Pure: no I/O.

An entry delivered `k` times (its PEL delivery count) is due once it has been idle
``min_idle_ms * factor^(k-1)`` ms, at most ``backoff_max_ms``. Two kinds are due at
``min_idle_ms`` whatever their count: an entry whose next delivery would exceed
``max_deliveries`` (the claim dead-letters it: waiting would only delay that), and one the
job's own consumer already owns (an earlier attempt of the task claimed it). The claim script
(``recovery/redis_io/lua/claim_due.lua``) applies the same rule inside Redis; the dry run
applies it here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from recovery.params import JobParams
from recovery.redis_io.claim_due import DueStep

NO_CAP_MS = 2**53  # the cap without backoff_max_ms: exactly representable in Lua and Python


def schedule_args(params: JobParams) -> list[Any]:
    """The schedule as the claim script takes it: factor, cap (ms), delivery limit."""
    cap = params.backoff_max_ms if params.backoff_max_ms is not None else NO_CAP_MS
    return [repr(float(params.backoff_factor or 1)), cap, params.max_deliveries]


def due_step(params: JobParams, cursor: str, end: str = "+") -> DueStep:
    """A claim step under the schedule of `params`, from `cursor` to `end` (inclusive)."""
    return DueStep(params.min_idle_ms, cursor, params.count, schedule_args(params), end)


def wait_ms(params: JobParams, count: int, own: bool = False) -> float:
    """How long (ms) an entry delivered `count` times must be idle before it is due; `own`:
    the job's consumer owns it."""
    if own or count >= params.max_deliveries or count <= 1 or not params.backoff:
        return params.min_idle_ms
    cap = params.backoff_max_ms if params.backoff_max_ms is not None else NO_CAP_MS
    try:
        return min(params.min_idle_ms * float(params.backoff_factor or 1) ** (count - 1), cap)
    except OverflowError:
        return cap


def due_in_ms(params: JobParams, count: int, idle_ms: int, own: bool = False) -> int:
    """0 when the entry is due now, else the ms until it is (rounded up). A negative idle time
    (Redis 8.8 shows -1 for an entry XNACKed back to the group) is due now: its consumer gave
    it up."""
    if idle_ms < 0:
        return 0
    return max(0, math.ceil(wait_ms(params, count, own) - idle_ms))


@dataclass
class NotDue:
    """One unit's entries the schedule left alone: how many, and when the first of them
    becomes due (epoch ms; None when there is none)."""

    entries: int = 0
    next_due_ms: int | None = None

    def add(self, entries: int, due_in: int | None, now_ms: int) -> None:
        """Count `entries` not due, the first of them due in `due_in` ms from `now_ms`."""
        self.entries += entries
        if due_in is not None:
            self.merge(NotDue(0, now_ms + due_in))

    def merge(self, other: NotDue) -> None:
        """Add `other`'s entries; keep the earlier due time."""
        self.entries += other.entries
        times = [t for t in (self.next_due_ms, other.next_due_ms) if t is not None]
        self.next_due_ms = min(times) if times else None
