"""Driver-side Redis work: find the (stream, group) units, spread them, tidy up after.

Only counts and names cross here, never messages.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial

import redis
from redis.cluster import RedisCluster

from recovery.errors import (
    DeadLetterNameError,
)
from recovery.executor.handover.modes import mode_of
from recovery.params import Unit
from recovery.redis_io.cluster import groups_by_node, node_of, spread
from recovery.redis_io.commands import key_types, stream_groups
from recovery.redis_io.key_holds import hold_key
from recovery.redis_io.redis_conn import RedisConn, key_refused, no_such_key, wrong_type
from recovery.redis_io.round_trips import calls_of, script_replies
from recovery.redis_io.scripts import delete_empty_consumers
from recovery.redis_io.stream_full import GroupSeen, StreamSeen, read_streams
from recovery.redis_io.streams import info_rows, shown
from recovery.settings.model import Settings, order_params
from recovery.targets.keys import (
    NO_ACCESS,
    NO_KEY,
    Skipped,
    drop_dead_letter_streams,
    is_own_key,
    selected_keys,
    type_unless_denied,
)

log = logging.getLogger(__name__)
CLEAN_UP_PER_CALL = 100  # consumers per clean-up script call on a standalone server


@dataclass(frozen=True)
class WorkUnit:
    """One stream and group to recover, with its PEL size and lag (None where the server
    cannot tell) as discovery read them, and the primary that owns the stream on a Redis
    Cluster (``host:port``; "" on a standalone server). `seen`: the stream's length and the
    group's consumers where discovery read them too (its FULL read, ``stream_full``), so the
    group health need not read them again; None otherwise."""

    stream: str
    group: str
    pending: int
    node: str = ""
    lag: int | None = None
    seen: GroupSeen | None = field(default=None, compare=False, repr=False)


def discover(conn: RedisConn, settings: Settings, warnings: list[str] | None = None,
             quiet: list[WorkUnit] | None = None) -> tuple[list[WorkUnit], list[Skipped]]:
    """Units with something pending, and the keys or groups skipped (with reasons); a
    selection that matches no key at all is added to `warnings` (and logged). The selected
    groups with nothing pending are added to `quiet`, if given: health-only units, never
    claimed from, so the health and the metrics show them with pending 0.

    One command per key, pipelined (a round trip per 1000 keys): ``XINFO STREAM <key> FULL
    COUNT 1`` on a standalone server whose user may run it (``stream_full``; the units keep
    what it shows for the group health), else XINFO GROUPS. Their error replies tell a
    missing key or one the user may not access; TYPE only for the keys found of another
    type (to name the type in the reason).
    """
    skipped: list[Skipped] = []
    units: list[WorkUnit] = []
    mode = mode_of(settings.reprocess.mode)
    undecided: set[str] = set()
    streams = _stream_groups(conn, settings, skipped, warnings, undecided)
    if undecided:  # names the template could make: decided once every group is known
        wanted = settings.streams.groups
        selected = [(s, [n for n in (shown(g["name"]) for g in groups)  # type: ignore[arg-type]
                         if not wanted or n in wanted]) for s, groups, _ in streams]
        with conn.errors():
            dropped = drop_dead_letter_streams(conn.client, settings, selected, undecided, skipped)
        streams = [entry for entry in streams if entry[0] not in dropped]
    for stream, groups, full in streams:
        try:
            settings.dead_letter.names.check_source(stream)
            mode.check_source(stream, settings.reprocess.options())
            check_hold_name(settings, stream)
        except DeadLetterNameError as exc:
            skipped.append(Skipped(stream, None, str(exc)))
            continue
        every = _units_of(conn.client, stream, groups, settings.streams.groups, skipped, full)
        found = [u for u in every if u.pending]
        if quiet is not None:
            quiet += [u for u in every if not u.pending]
        if found:  # the mode's refusal (ConfigError, exit 2) before anything is claimed
            mode.check_stream(stream, [shown(g["name"]) for g in groups],  # type: ignore[arg-type]
                              settings.reprocess.options())
        units += found
    pairs = [(u.stream, u.group) for u in units]  # the mode's refusal of them together
    mode.check_units(pairs, settings.dead_letter.names, settings.reprocess.options())
    mode.check_targets(conn, pairs, settings.reprocess.options())
    return units, skipped


def check_hold_name(settings: Settings, stream: str) -> None:
    """Raise DeadLetterNameError when `stream` is ordered, its dead-lettered heads hold
    their keys (``order.dead_letter_releases = false``) and no hash of held keys can share
    its hash slot (``recovery.redis_io.key_holds.hold_key``): such a stream is skipped."""
    order = settings.order
    if order.ordered and not order.dead_letter_releases and \
            order_params(settings).field_of(stream) is not None:  # type: ignore[union-attr]
        hold_key(order.hold_prefix, stream, "")


def _stream_groups(conn: RedisConn, settings: Settings, skipped: list[Skipped],
                   warnings: list[str] | None = None,
                   undecided: set[str] | None = None
                   ) -> list[tuple[str, list[dict[str, object]], StreamSeen | None]]:
    """Each selected key that is a stream, with its groups as XINFO GROUPS rows and its
    FULL read (None where XINFO GROUPS was read instead); the others skipped with the reason
    (no such key, not a stream, not accessible to the ACL user), except the job's own keys
    (``is_own_key``: a journal, split cursor or range list, run registration that is no
    stream), which are left alone without a word."""
    candidates = list(selected_keys(conn, settings, skipped, warnings, undecided))
    with conn.errors():
        replies = read_streams(conn.client, candidates)
        if replies is None:
            replies = stream_groups(conn.client, candidates)
    other = [n for n, r in zip(candidates, replies, strict=True) if wrong_type(r)]
    with conn.errors():
        kinds = dict(zip(other, key_types(conn.client, other), strict=True))
    streams: list[tuple[str, list[dict[str, object]], StreamSeen | None]] = []
    for name, reply in zip(candidates, replies, strict=True):
        reason = _not_a_stream(name, reply, kinds.get(name), conn)
        if reason is not None and is_own_key(name, settings):
            log.debug("leave %s alone: one of the job's own keys (%s)", name, reason)
        elif reason is not None:
            skipped.append(Skipped(name, None, reason))
        elif isinstance(reply, StreamSeen):
            streams.append((name, reply.groups, reply))
        else:
            streams.append((name, info_rows(reply), None))  # type: ignore[arg-type]
    return streams


def _not_a_stream(name: str, reply: object, kind: object, conn: RedisConn) -> str | None:
    """Why a key's discovery read (and TYPE reply `kind`, read for a WRONGTYPE error)
    rules it out, or None for a stream. Other errors are raised as the job's typed errors."""
    if key_refused(reply):
        return NO_ACCESS
    if no_such_key(reply):
        return NO_KEY
    if kind is not None:
        kind = type_unless_denied(kind, conn)
        if kind is None:
            return NO_ACCESS
        return NO_KEY if kind == "none" else f"not a stream (type {kind}): left alone"
    conn.checked(reply, name)
    return None


def _units_of(client: redis.Redis, stream: str, groups: list[dict[str, object]],
              wanted: list[str], skipped: list[Skipped], full: StreamSeen | None
              ) -> list[WorkUnit]:
    """The stream's groups (all, or the `wanted` ones; XINFO GROUPS rows), with their
    pending entries (maybe 0), each with what the stream's `full` read showed of it. A group
    whose name is not UTF-8 is skipped when it has pending entries (and no `wanted` name
    can match it)."""
    pending: dict[str, int] = {}
    lags: dict[str, int | None] = {}
    for g in groups:
        name, count = g["name"], int(g["pending"])  # type: ignore[call-overload]
        if isinstance(name, str):
            pending[name] = count
            lags[name] = None if g.get("lag") is None else int(g["lag"])  # type: ignore[call-overload]
        elif count and not wanted:
            skipped.append(Skipped(stream, shown(name),  # type: ignore[arg-type]
                                   "group name is not UTF-8: not supported"))
    for group in wanted:
        if group not in pending:
            skipped.append(Skipped(stream, group, "no such consumer group: fix streams.groups"))
    names = [g for g in wanted if g in pending] if wanted else list(pending)
    node = node_of(client, stream)
    return [WorkUnit(stream, g, pending[g], node, lags[g], None if full is None else full.of(g))
            for g in names]


def assign(units: list[WorkUnit], partitions: int, consumer_prefix: str, run_id: str,
           splits: list[int] | None = None,
           cursor: Callable[[WorkUnit], str | None] | None = None) -> list[tuple[Unit, int]]:
    """Spread units over at most `partitions` parts, biggest PEL first to the lightest part:
    (unit, part) pairs.

    On a Redis Cluster each part holds the units of one primary (parts per primary in
    proportion to its pending entries; see ``recovery.redis_io.cluster.groups_by_node``), so a
    partition talks to the node that owns its keys. The consumer name depends only on run
    and part, so a retried task claims as the same consumer and takes back what its failed
    attempt claimed.

    `splits`: how many parts claim each unit (``recovery.driver.split.split_counts``; all 1
    when not given); a unit split over k > 1 parts is in k pairs, on k different parts of
    its node, each with that part's consumer and the unit's shared cursor, `cursor(unit)`.
    """
    counts = splits or [1] * len(units)
    pieces = [(unit, k) for unit, k in zip(units, counts, strict=True) for _ in range(k)]
    result: list[tuple[Unit, int]] = []
    first = 0
    for group, parts in groups_by_node(pieces, partitions, lambda p: p[0].node,
                                       lambda p: p[0].pending // p[1]):
        whole = sorted(dict.fromkeys(group), key=lambda p: (p[0].stream, p[0].group))
        placed = spread([u for u, _ in whole], [k for _, k in whole], lambda u: u.pending,
                        parts)
        shared = {u for u, k in whole if min(k, parts) > 1}
        for unit, part in placed:
            consumer = job_consumer(consumer_prefix, run_id, first + part)
            key = cursor(unit) if cursor is not None and unit in shared else None
            result.append((Unit(unit.stream, unit.group, consumer, key), first + part))
        first += parts
    return result


def job_consumer(prefix: str, run_id: str, part: int) -> str:
    """The consumer name the job claims with for one part of one run."""
    return f"{job_consumer_stem(prefix, run_id)}{part}"


def job_consumer_stem(prefix: str, run_id: str) -> str:
    """``<prefix>-<run id>-``: one run's job consumers are the stem and a part number."""
    return f"{prefix}-{run_id}-"


@dataclass(frozen=True)
class CleanUp:
    """What a consumer clean-up did: how many consumers it `removed`, and per (stream, group)
    it looked at, that group's PEL summary as the clean-up read it just before its deletions
    (``delete_empty_consumers``: the raw ``XPENDING stream group`` reply, or the error that
    the stream or group, or the whole script call, answered in its place)."""

    removed: int
    summaries: dict[tuple[str, str], object]


def clean_up_consumers(conn: RedisConn, targets: list[tuple[str, str, str]]) -> CleanUp:
    """Run the delete-if-empty script for each (stream, group, consumer) of `targets`: one
    PEL summary read per (stream, group), however many of its consumers are targets; the
    groups of many streams per script call on a standalone server (up to about
    ``CLEAN_UP_PER_CALL`` consumers; a group's consumers never split), one group per call on
    a Redis Cluster (the streams' slots differ), the calls pipelined."""
    by_group: dict[tuple[str, str], list[str]] = {}
    for stream, group, consumer in targets:
        by_group.setdefault((stream, group), []).append(consumer)
    client = conn.client
    per_call = 1 if isinstance(client, RedisCluster) else CLEAN_UP_PER_CALL
    calls = calls_of(list(by_group.items()), per_call, lambda item: len(item[1]))
    removed, summaries = 0, {}
    for start in range(0, len(calls), 1000):
        chunk = calls[start : start + 1000]
        queues = [partial(delete_empty_consumers, client, [(s, g, cs) for (s, g), cs in call])
                  for call in chunk]
        with conn.errors():
            replies = script_replies(client, queues)
        for call, reply in zip(chunk, replies, strict=True):
            for (key, _), one in zip(call, _group_replies(reply, len(call)), strict=True):
                summaries[key] = one[0]
                removed += sum(1 for r in one[1:] if r == 1)
    return CleanUp(removed, summaries)


def _group_replies(reply: object, count: int) -> list[list[object]]:
    """One script call's reply as ``[summary, r_1, ...]`` per group; a call that failed as a
    whole (its error in place of the reply) gives that error as each group's summary."""
    if isinstance(reply, list):
        return reply
    return [[reply]] * count
