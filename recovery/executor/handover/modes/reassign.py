"""``reprocess.mode = reassign``: each entry XCLAIMed to a live consumer of its group (seen
within ``reprocess.live_within_ms``, never one of the job's), in turn, fewest pending first,
its delivery count set back to its deliveries to the application so far, in one atomic
script call per batch (``recovery/redis_io/lua/reassign.lua``). A call sent again after its
reply was lost answers 0 for what its first sending reassigned: each 0 is read again
(``recovery.executor.handover.resent.reread_zeros``): pending for the owner the job chose ->
reassigned, for none -> uncertain."""

from __future__ import annotations

from functools import partial

import redis

from recovery.executor.claimed import carried_deliveries
from recovery.executor.handover.dead_letter import batches, left_alone
from recovery.executor.handover.lease import REASON_VANISHED
from recovery.executor.handover.modes.base import ReprocessMode, deliveries_so_far
from recovery.executor.handover.resent import (
    REASON_UNCERTAIN_REASSIGN,
    UNCERTAIN,
    PendingFor,
    reread_zeros,
    sent_noting_retries,
)
from recovery.executor.handover.routed import RoutedBatch
from recovery.params import JobParams, Unit
from recovery.redis_io.error_codes import unit_vanished
from recovery.redis_io.round_trips import ScriptCall
from recovery.redis_io.scripts import MOVED_NOT_OURS, REASSIGNED, reassign_batch
from recovery.redis_io.streams import live_consumers
from recovery.schemas import Action, Mode


class ReassignMode(ReprocessMode):
    """Given to a live consumer of its group (``reassigned``, the new owner in
    ``reassigned_to``); without one it stays pending (``failed``)."""

    name = Mode.REASSIGN
    done = Action.REASSIGNED
    planned = Action.WOULD_REASSIGN
    report_columns = ("reassigned_to",)
    scripts = ("reassign",)
    stays_pending = True

    def hand_over(self, client: redis.Redis, params: JobParams, rb: RoutedBatch,
                  rows: list[int], read_at: float | None) -> None:
        """Give `rows` to live consumers of their groups, in turn (fewest pending first),
        each with its delivery count set back to its deliveries to the application so far:
        batched atomic script calls, one pipeline. Rows of a group without a live consumer
        stay pending on the job's consumer (reported failed, with the reason)."""
        calls: list[ScriptCall] = []
        for unit, unit_rows in rb.by_unit(rows).items():
            live = _live(client, params, rb, unit, unit_rows)
            pairs = [(i, live[k % len(live)]) for k, i in enumerate(unit_rows)] if live else []
            for chunk in batches(pairs, params.dlq_batch_size):
                # The PEL count to set: the deliveries so far, but what a requeued copy
                # carries (it still carries it).
                entries = [(rb.id[i], owner, max(0, deliveries_so_far(rb, i)
                                                 - carried_deliveries(rb.fields_of(i))))
                           for i, owner in chunk]
                calls.append((chunk, partial(reassign_batch, client, unit, entries)))
        replies, resent = sent_noting_retries(client, calls)
        if resent:  # a lost reply: what its first sending reassigned, answered 0 again
            replies = reread_zeros(client, replies,
                                   lambda job: (rb.stream[job[0]], rb.group[job[0]], rb.id[job[0]]))
        for (i, owner), status in replies:
            if status == UNCERTAIN:
                rb.set(i, Action.SKIPPED, REASON_UNCERTAIN_REASSIGN)
            elif status == REASSIGNED or status == PendingFor(owner):
                rb.set(i, Action.REASSIGNED, outcome=owner)
            else:  # pending for another consumer: no longer the job's
                left_alone(rb, i, MOVED_NOT_OURS if isinstance(status, PendingFor) else status)


def _live(client: redis.Redis, params: JobParams, rb: RoutedBatch, unit: Unit,
          rows: list[int]) -> list[str]:
    """The unit's live consumers; none (its `rows` reported) when it has none or vanished."""
    within_ms = params.mode_option("live_within_ms")
    try:
        live = live_consumers(client, unit.stream, unit.group, within_ms,
                              params.consumer_prefix + "-")
    except redis.ResponseError as exc:
        if not unit_vanished(exc):
            raise
        for i in rows:
            rb.set(i, Action.SKIPPED, REASON_VANISHED)
        return []
    if not live:
        reason = (f"no live consumer in the group (none seen within reprocess.live_within_ms "
                  f"= {within_ms} ms); stays pending for the next run")
        for i in rows:
            rb.set(i, Action.FAILED, reason)
    return live


MODE = ReassignMode()
