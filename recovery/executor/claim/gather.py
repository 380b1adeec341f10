"""Claim steps of small units gathered into one hand-over (the one pass).

A unit of a few hundred entries is claimed in one step. Handed over alone, each such step
pays a hand-over of its own: a round trip for its dead-letter moves, one for its acks, a
REPORT batch and its count. Gathered, consecutive steps (of one unit or several, in claim
order) share them: their dead-letter moves and acks go out in one pipeline per unit group.
Each claim stays its own atomic step, and each step is journaled before it is gathered
(``recovery.executor.claim.journaled``), so before any side effect of the batch it joins.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator

from recovery.executor.claim.loop import ClaimStep
from recovery.executor.claimed import Claimed

GATHER_FOR_S = 0.05  # a batch is handed over once it has waited this long for more (s)


def gathered(steps: Iterable[ClaimStep], rows: int, for_s: float = GATHER_FOR_S
             ) -> Iterator[ClaimStep]:
    """`steps` joined into steps of about `rows` entries or fewer: a step is added to the
    batch being gathered while the batch holds fewer than `rows` entries and has waited less
    than `for_s` seconds for more since its first step came (a batch whose first step has no
    lease reading is not gathered); a batch that reaches `rows` goes at once. Claimed
    entries thus wait at most about `for_s` for later claims, however long ago their own
    claim was sent (a round sent ahead, ``recovery.executor.claim.first_steps``). A joined
    step's lease reading is its oldest claim's (None when a step has none), so the
    hand-over reads the lease again when it is stale (``recovery.executor.handover.lease``)."""
    held: list[ClaimStep] = []
    size, since = 0, 0.0
    for step in steps:
        if held and (size + len(step.claimed) > rows or held[0].sent_at is None
                     or time.monotonic() - since > for_s):
            yield _joined(held)
            held, size = [], 0
        if not held:
            since = time.monotonic()
        held.append(step)
        size += len(step.claimed)
        if size >= rows:  # full: handed over before the next claim (a big unit's steps)
            yield _joined(held)
            held, size = [], 0
    if held:
        yield _joined(held)


def _joined(steps: list[ClaimStep]) -> ClaimStep:
    if len(steps) == 1:
        return steps[0]
    sent = [s.sent_at for s in steps]
    oldest = None if None in sent else min(t for t in sent if t is not None)
    return ClaimStep(Claimed.joined([s.claimed for s in steps]), oldest,
                     sum(s.joins for s in steps))
