"""What happens to routed entries on an executor: dead-letter moves, then re-processing as
``reprocess.mode`` says (``recovery.executor.handover.modes``: by handler calls and acks,
by requeue or by reassignment).

Works on one batch of claimed entries (``recovery.executor.claimed.Claimed``, rows are indices, no
per-row dicts) and returns a ``schemas.REPORT`` batch with one row per input row, in input
order. Round trips are per step, not per entry.

A stream or group that vanishes during the run (NOGROUP, WRONGTYPE) costs only its own rows:
they are reported skipped and the other units go on.
"""

from __future__ import annotations

import pyarrow as pa
import redis

from recovery.executor.claimed import Claimed
from recovery.executor.handover.dead_letter import dead_letter, over_limit
from recovery.executor.handover.lease import REASON_GONE
from recovery.executor.handover.modes import mode_of
from recovery.executor.handover.ready import clear_deleted, ready
from recovery.executor.handover.routed import RoutedBatch
from recovery.params import JobParams
from recovery.schemas import Action, Route


def apply_batch(client: redis.Redis, params: JobParams, claimed: Claimed,
                read_at: float | None = None) -> pa.RecordBatch:
    """Route, dead-letter and re-process a batch of claimed entries; return its REPORT batch.

    `read_at` (``time.monotonic()`` seconds), when given, is when the job consumer's
    ownership of all the batch's entries was last read (their claim, sent then): the first
    lease read is skipped while that reading is younger than ``LEASE_FRESH_S``.
    """
    rb = RoutedBatch(claimed, params.max_deliveries)
    routes = rb.by_route()
    for i in routes[Route.GONE]:  # a planned entry left alone has its note (plan_claim)
        rb.set(i, Action.SKIPPED, rb.plan_of(i)[1] or REASON_GONE)
    clear_deleted(client, rb, routes[Route.DELETED])
    dead_letter(client, params, rb, over_limit(rb, routes[Route.DEAD_LETTER]))
    rows = ready(client, params, rb, routes[Route.HANDLE])
    mode = mode_of(params.reprocess_mode)
    mode.hand_over(client, params, rb, rows, read_at)
    return rb.report(mode.report_columns)
