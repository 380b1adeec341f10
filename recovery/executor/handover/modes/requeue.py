"""``reprocess.mode = requeue``: each entry appended again as a new message to its stream
(or to ``reprocess.requeue_stream``, a per-group retry stream), its deliveries so far in
``x-recovery-deliveries``, and the original acked, in one atomic script call per batch
(``recovery/redis_io/lua/requeue.lua``)."""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial

import redis

from recovery.errors import ConfigError
from recovery.executor.claimed import copy_fields
from recovery.executor.handover.dead_letter import batches, left_alone, moved_and_deleted
from recovery.executor.handover.modes.base import (
    ModeOptions,
    ReprocessMode,
    deliveries_so_far,
)
from recovery.executor.handover.routed import RoutedBatch
from recovery.params import JobParams
from recovery.redis_io.dlq_names import refused_requeue_reason, requeue_key
from recovery.redis_io.error_codes import TargetRefused
from recovery.redis_io.round_trips import ScriptCall, run_script_calls
from recovery.redis_io.scripts import MOVED_TOO_BIG, requeue_batch
from recovery.schemas import Action, Mode

REASON_TOO_BIG_TO_REQUEUE = ("too many fields (~3950 at most) to requeue from a script; "
                             "stays pending")


class RequeueMode(ReprocessMode):
    """Appended again as a new message, the original acked (``requeued``, the copy's ID in
    ``requeued_id``)."""

    name = Mode.REQUEUE
    done = Action.REQUEUED
    planned = Action.WOULD_REQUEUE
    report_columns = ("requeued_id",)
    scripts = ("requeue",)

    def check_stream(self, stream: str, groups: Sequence[str], options: ModeOptions
                     ) -> None:
        """Refuse a requeue whose copies every other group of the stream would read again:
        the source as target of a stream with several groups, or a retry stream without
        ``{group}`` shared by them."""
        template = options["requeue_stream"]
        if len(groups) < 2 or (template is not None and "{group}" in template):
            return
        names = ", ".join(groups)
        target = stream if template is None else f"retry stream {template!r}"
        raise ConfigError(
            f"reprocess.mode = requeue would append copies to {target} of stream {stream!r}, "
            f"which has {len(groups)} consumer groups ({names}), and every group would read "
            "them again: set reprocess.requeue_stream to a per-group retry stream, e.g. "
            "{stream}:retry:{group}, or use reprocess.mode = handler")

    def hand_over(self, client: redis.Redis, params: JobParams, rb: RoutedBatch,
                  rows: list[int], read_at: float | None) -> None:
        """Append `rows` again to their requeue targets with their deliveries so far (the
        count without the job's own claim) and ack the originals: batched atomic script
        calls, one pipeline. The copies hold the fields the job read (an entry deleted
        upstream since its claim is still requeued once, from that content, as the handler
        would get it)."""
        template = params.mode_option("requeue_stream")
        calls: list[ScriptCall] = []
        for unit, unit_rows in rb.by_unit(rows, ordered=True).items():
            target = requeue_key(unit.stream, unit.group, template)
            for chunk in batches(unit_rows, params.dlq_batch_size):
                entries = [(rb.id[i], copy_fields(rb.fields_of(i), deliveries_so_far(rb, i)))
                           for i in chunk]
                calls.append((chunk, partial(requeue_batch, client, unit, target, entries,
                                             delete_acked=params.delete_acked)))
        for i, status in run_script_calls(client, calls):
            if isinstance(status, TargetRefused):
                target = requeue_key(rb.stream[i], rb.group[i], template)
                rb.set(i, Action.SKIPPED, refused_requeue_reason(target, status))
            elif status == MOVED_TOO_BIG:
                rb.set(i, Action.FAILED, REASON_TOO_BIG_TO_REQUEUE)
            elif not left_alone(rb, i, status):
                copy_id, deleted = moved_and_deleted(status)
                rb.set(i, Action.REQUEUED, outcome=copy_id, entry_deleted=deleted)


MODE = RequeueMode()
