"""``reprocess.mode = requeue``: each entry appended again as a new message to its stream
(or to ``reprocess.requeue_stream``, a per-group retry stream), its deliveries so far in
``x-recovery-deliveries``, and the original acked, in one atomic script call per batch
(``recovery/redis_io/lua/requeue.lua``). A call sent again after its reply was lost answers
0 for what its first sending requeued: each 0 is read again
(``recovery.executor.handover.resent.reread_zeros``), one no longer pending is reported
uncertain."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from functools import partial

import redis

from recovery.errors import ConfigError, DeadLetterNameError
from recovery.executor.claimed import copy_fields
from recovery.executor.handover.dead_letter import batches, left_alone, moved_and_deleted
from recovery.executor.handover.modes.base import (
    ModeOptions,
    Pairs,
    ReprocessMode,
    deliveries_so_far,
)
from recovery.executor.handover.resent import (
    REASON_UNCERTAIN_REQUEUE,
    UNCERTAIN,
    PendingFor,
    reread_zeros,
    sent_noting_retries,
)
from recovery.executor.handover.routed import RoutedBatch
from recovery.params import JobParams
from recovery.redis_io.commands import key_types, oldest_entries, stream_groups
from recovery.redis_io.dlq_names import (
    DeadLetterNames,
    is_letter,
    refused_requeue_reason,
    requeue_key,
)
from recovery.redis_io.error_codes import TargetRefused
from recovery.redis_io.redis_conn import RedisConn
from recovery.redis_io.round_trips import ScriptCall
from recovery.redis_io.scripts import MOVED_NOT_OURS, MOVED_TOO_BIG, requeue_batch
from recovery.redis_io.streams import info_rows, shown
from recovery.rows import Skipped
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

    def check_source(self, stream: str, options: ModeOptions) -> None:
        """Raise DeadLetterNameError when no retry stream (``reprocess.requeue_stream``) of
        `stream` can share its hash slot (a ``}`` but no hash tag, e.g. ``a}b``): the
        executor could not name where its copies go."""
        template = options["requeue_stream"]
        if template is None:
            return
        try:
            requeue_key(stream, "", template)
        except DeadLetterNameError as exc:
            raise DeadLetterNameError(
                f"reprocess.requeue_stream {template!r} names no retry stream for {stream!r} "
                f"({exc}): its entries are left alone; rename the stream or give it a "
                "{tag}, or use reprocess.mode = handler") from None

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

    def check_units(self, units: Pairs, names: DeadLetterNames, options: ModeOptions
                    ) -> None:
        """Raise DeadLetterNameError when a unit's dead-letter stream is the retry stream
        (``reprocess.requeue_stream``) of a unit: requeued copies and dead letters would
        share it; or when two units' retry streams are one key (``a`` and ``{a}`` both name
        ``{a}:retry:g``): the copies of both would mix, and a copy does not say its source."""
        template = options["requeue_stream"]
        if template is None:
            return
        targets = _one_unit_per_target(units, template)
        for stream, group in units:
            key = None
            with contextlib.suppress(DeadLetterNameError):  # such a source is skipped later
                key = names.key(stream, group)
            if key in targets:
                other = targets[key]
                raise DeadLetterNameError(
                    f"the dead-letter stream of {stream} / {group} is {key!r}, the "
                    f"reprocess.requeue_stream of {other[0]} / {other[1]}: requeued "
                    "copies and dead letters would share it; change dead_letter.stream or "
                    "reprocess.requeue_stream")

    def check_targets(self, conn: RedisConn, units: Pairs, options: ModeOptions) -> None:
        """Raise ConfigError when a unit's retry stream (``reprocess.requeue_stream``)
        already has several consumer groups: each would read the requeued copies again, as
        :meth:`check_stream` refuses for a source. One XINFO GROUPS per target, pipelined; a
        target that is missing or of another type is left to the requeue script."""
        template = options["requeue_stream"]
        if template is None:
            return
        targets: dict[str, tuple[str, str]] = {}
        for unit, key in _targets(units, template):
            targets.setdefault(key, unit)
        with conn.errors():
            replies = stream_groups(conn.client, list(targets))
        for (target, (stream, group)), reply in zip(targets.items(), replies, strict=True):
            groups = [shown(g["name"]) for g in info_rows(reply)  # type: ignore[arg-type]
                      ] if isinstance(reply, list) else []
            if len(groups) >= 2:
                raise ConfigError(
                    f"reprocess.requeue_stream {template!r} names {target!r} for {stream} / "
                    f"{group}, a stream with {len(groups)} consumer groups "
                    f"({', '.join(groups)}): every group would read the requeued copies; "
                    "choose a retry stream of the job's own, e.g. {stream}:retry:{group}")

    def refused_targets(self, client: redis.Redis, units: Pairs, options: ModeOptions
                        ) -> list[Skipped]:
        """The units whose retry stream is a key of another type or a stream of dead
        letters (the requeue script refuses both; one TYPE per distinct target, then one
        XRANGE ... COUNT 1 per stream among them, pipelined). A source as its own target is
        never refused here: discovery read it as a stream."""
        template = options["requeue_stream"]
        if template is None:
            return []
        targets = {unit: key for unit, key in _targets(units, template) if key != unit[0]}
        distinct = list(dict.fromkeys(targets.values()))
        kinds = {key: shown(kind) if isinstance(kind, bytes | str) else None for key, kind
                 in zip(distinct, key_types(client, distinct), strict=True)}
        streams = [key for key in distinct if kinds[key] == "stream"]
        lettered = {key for key, reply in zip(streams, oldest_entries(client, streams),
                                              strict=True)
                    if isinstance(reply, list) and reply and is_letter(reply[0][1][::2])}
        refused = []
        for (stream, group), key in targets.items():
            kind = kinds[key]
            why = "it holds dead letters" if key in lettered else "it is no stream"
            if kind is not None and (key in lettered or kind not in ("stream", "none")):
                refused.append(Skipped(stream, group, refused_requeue_reason(
                    key, TargetRefused(kind, why))))
        return refused

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
        pairs, resent = sent_noting_retries(client, calls)
        if resent:  # a lost reply: what its first sending requeued, answered 0 again
            pairs = reread_zeros(client, pairs, lambda i: (rb.stream[i], rb.group[i], rb.id[i]))
        for i, status in pairs:
            if isinstance(status, PendingFor):
                left_alone(rb, i, MOVED_NOT_OURS)
            elif status == UNCERTAIN:
                rb.set(i, Action.SKIPPED, REASON_UNCERTAIN_REQUEUE)
            elif isinstance(status, TargetRefused):
                target = requeue_key(rb.stream[i], rb.group[i], template)
                rb.set(i, Action.SKIPPED, refused_requeue_reason(target, status))
            elif status == MOVED_TOO_BIG:
                rb.set(i, Action.FAILED, REASON_TOO_BIG_TO_REQUEUE)
            elif not left_alone(rb, i, status):
                copy_id, deleted = moved_and_deleted(status)
                rb.set(i, Action.REQUEUED, outcome=copy_id, entry_deleted=deleted)


def _one_unit_per_target(units: Pairs, template: str) -> dict[str, tuple[str, str]]:
    """{retry stream: its unit}; raises DeadLetterNameError when `template` names one key
    for two units."""
    targets: dict[str, tuple[str, str]] = {}
    for unit, target in _targets(units, template):
        other = targets.setdefault(target, unit)
        if other != unit:
            raise DeadLetterNameError(
                f"reprocess.requeue_stream {template!r} names {target!r} for both "
                f"{other[0]} / {other[1]} and {unit[0]} / {unit[1]}: their requeued copies "
                "would mix, and a copy does not say its source; rename one stream or "
                "select only one of them")
    return targets


def _targets(units: Pairs, template: str) -> list[tuple[tuple[str, str], str]]:
    """Each unit with its retry stream named by `template`, in order; a unit whose stream
    can have none (DeadLetterNameError) is left out: such a source is skipped later."""
    named = []
    for stream, group in units:
        with contextlib.suppress(DeadLetterNameError):
            named.append(((stream, group), requeue_key(stream, group, template)))
    return named


MODE = RequeueMode()
