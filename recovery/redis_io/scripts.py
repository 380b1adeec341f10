"""Server-side Lua scripts of the job (recovery/redis_io/lua/*.lua), registered once per client.

Each call goes through EVALSHA. Every write helper takes an optional pipeline so callers can
batch. Alone, a call loads its script on NOSCRIPT (redis-py's Script does); queued on a
pipeline, a NOSCRIPT reply is the caller's to handle (``load_scripts``, then send it again):
redis-py would otherwise ask SCRIPT EXISTS before every pipeline it sends, one more round
trip each.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from itertools import chain
from typing import Any

import redis
from redis.commands.core import Script

from recovery.params import Unit

CopyFields = list[tuple[bytes, bytes]]  # a copy's (name, value) pairs, as streams.Fields
LUA = resources.files("recovery.redis_io").joinpath("lua")
# Every script of the job: each file in lua/, by its name without ``.lua`` (a
# re-processing mode names its own in ``ReprocessMode.scripts``).
SCRIPT_NAMES = tuple(sorted(f.name.removesuffix(".lua") for f in LUA.iterdir()
                            if f.name.endswith(".lua")))


def _source(name: str) -> str:
    return LUA.joinpath(f"{name}.lua").read_text("utf-8")


def scripts_for(client: redis.Redis) -> dict[str, Script]:
    """The job's scripts registered on `client` (cached on the client object)."""
    cached: dict[str, Script] | None = getattr(client, "_recovery_scripts", None)
    if cached is None:
        cached = {name: client.register_script(_source(name)) for name in SCRIPT_NAMES}
        client._recovery_scripts = cached  # type: ignore[attr-defined]
    return cached


def load_scripts(client: redis.Redis) -> None:
    """Load the job's scripts into the server's script cache (after a NOSCRIPT reply: the
    server restarted or its cache was flushed)."""
    for script in scripts_for(client).values():
        client.script_load(script.script)


def _call(client: redis.Redis, name: str, keys: Sequence[Any], args: Sequence[Any],
          pipe: Any) -> Any:
    """Run the job's script `name` now (its reply), or queue it on `pipe` (see module doc)."""
    script = scripts_for(client)[name]
    if pipe is None:
        return script(keys=keys, args=args)
    return pipe.evalsha(script.sha, len(keys), *keys, *args)


@dataclass(frozen=True)
class DeadLetter:
    """One entry to dead-letter, with the metadata written next to its fields."""

    id: str
    delivery_count: int
    idle_ms: int
    last_owner: str | None
    reason: str
    error: str | None = None
    # Its ordering key, where its unit holds keys (DeadLetterContext.hold_key): recorded as
    # held behind it when it moves. An empty key (b"") is a key; None is none.
    order_key: bytes | None = None


def _key_arg(key: bytes | None) -> bytes:
    """The move script's key argument: b"" for no key, else ``=`` and the key (so an empty
    key, b"=", still holds)."""
    return b"" if key is None else b"=" + key


@dataclass(frozen=True)
class DeadLetterContext:
    """What is the same for every entry of one dead-letter batch."""

    stream: str
    group: str
    consumer: str
    dlq: str
    run_id: str
    delivery_limit: int
    death_time_ms: int
    # Check the dead-letter stream's newest entry too (XINFO STREAM, where the ACL user may
    # run it), not only its oldest (XRANGE): dead_letter.lua.
    check_newest: bool = False
    # Ack a moved entry with XACKDEL ... ACKED (reprocess.delete_acked; Redis 8.2+).
    delete_acked: bool = False
    # The hash of the unit's keys held behind dead-lettered heads (order.dead_letter_releases
    # = false: recovery.redis_io.key_holds), or None: no key is held.
    hold_key: str | None = None


MOVED_NOT_OURS = 0
MOVED_DELETED = -1
MOVED_TOO_BIG = -2
# XACKDEL ... ACKED's code for an entry it acked: deleted from the stream, or kept because
# another consumer group still references it (not read or not acked by that group yet).
ACKDEL_DELETED = 1
ACKDEL_KEPT = 2
ACKDEL_GONE = -1  # XACKDEL's code for an ID not pending in the group (nothing done)


DeadLetterUnit = tuple[DeadLetterContext, Sequence[DeadLetter]]  # one unit's entries to move


def dead_letter_units(client: redis.Redis, units: Sequence[DeadLetterUnit], pipe: Any = None
                      ) -> list[Any]:
    """Move the entries of each of `units` ((context, entries)) to its context's dead-letter
    stream in one atomic call; only entries pending and owned by their context's consumer move.
    The contexts must share run id, delivery limit and death time; on a Redis Cluster give one
    unit per call (a call's keys must share a slot).

    Reply (without pipe): one element per unit, in order: a list with one element per entry,
    in order: the dead-letter ID (bytes) if moved (with the contexts' `delete_acked`:
    ``[ID, ACKDEL_DELETED or ACKDEL_KEPT]``), ``MOVED_NOT_OURS`` (0) if left alone,
    ``MOVED_DELETED`` (-1) if it was deleted upstream (then only acked), ``MOVED_TOO_BIG``
    (-2) if it has too many fields (~3950) to be re-added from a script (left pending); or,
    in its place, the error (a ResponseError: NOGROUP, WRONGTYPE) that unit's stream or
    group answered: that unit stopped there (entries it moved before stay moved), the other
    units went on; or ``NOTLETTERS <type> <why>`` when its dead-letter stream is not the
    job's (``error_codes.target_refused``), or ``NOTLETTERS hold:<type> ...`` when its hash
    of held keys is of another type: nothing of that unit was written or acked. Other
    errors fail the call as a whole. A unit with a ``hold_key`` records, in the same call,
    each moved entry's ``order_key`` as held behind it (``recovery.redis_io.key_holds``).
    """
    first = units[0][0]
    header = [first.run_id, first.delivery_limit, first.death_time_ms, int(first.check_newest),
              int(first.delete_acked)]
    keys: list[str] = []
    args: list[Any] = list(header)
    for ctx, entries in units:
        if [ctx.run_id, ctx.delivery_limit, ctx.death_time_ms, int(ctx.check_newest),
                int(ctx.delete_acked)] != header:
            raise ValueError("dead-letter units of one call must share run id, limit, time "
                             "and check")
        holds = ctx.hold_key is not None
        keys += [ctx.stream, ctx.dlq, *([ctx.hold_key] if ctx.hold_key is not None else [])]
        args += [ctx.group, ctx.consumer, ctx.stream, len(entries), int(holds)]
        for e in entries:
            args += [e.id, e.delivery_count, e.idle_ms, e.last_owner or "", e.reason,
                     e.error or "", *([_key_arg(e.order_key)] if holds else [])]
    return _call(client, "dead_letter", keys, args, pipe)  # type: ignore[no-any-return]


def requeue_batch(client: redis.Redis, unit: Unit, target: str,
                  entries: Sequence[tuple[str, CopyFields]], pipe: Any = None,
                  delete_acked: bool = False) -> list[Any]:
    """Requeue `entries` ((id, the copy's fields), in ascending ID order) from `unit`'s
    stream to `target` in one atomic call; only entries pending in its group and owned by its
    consumer move. The job
    sends the copies' fields itself: no read per entry.

    Reply (without pipe): one element per entry, in order: the copy's ID (bytes) if
    requeued (with `delete_acked`, the originals acked by XACKDEL ... ACKED: ``[ID,
    ACKDEL_DELETED or ACKDEL_KEPT]``), or ``MOVED_NOT_OURS`` / ``MOVED_TOO_BIG`` as for
    :func:`dead_letter_units`.
    """
    args: list[Any] = [unit.group, unit.consumer, entries[0][0], entries[-1][0],
                       int(delete_acked)]
    for entry_id, fields in entries:
        args += [entry_id, 2 * len(fields), *chain.from_iterable(fields)]
    return _call(client, "requeue", [unit.stream, target], args, pipe)  # type: ignore[no-any-return]


REASSIGNED = 1


def reassign_batch(client: redis.Redis, unit: Unit, entries: Sequence[tuple[str, str, int]],
                   pipe: Any = None) -> list[Any]:
    """Give `entries` ((id, new owner, delivery count to set)) of `unit`'s stream to their
    new owners in one atomic call; only entries pending in its group and owned by its
    consumer move.

    Reply (without pipe): one integer per entry, in order: ``REASSIGNED`` (1), or
    ``MOVED_NOT_OURS`` (0) / ``MOVED_DELETED`` (-1) as for :func:`dead_letter_units`.
    """
    args: list[Any] = [unit.group, unit.consumer]
    for entry_id, owner, count in entries:
        args += [entry_id, owner, count]
    return _call(client, "reassign", [unit.stream], args, pipe)  # type: ignore[no-any-return]


LEASE_FRESH_S = 0.1  # a lease reading serves the handler calls of this long after it (s)
LEASE_RENEWED = 1
LEASE_LOST = 0
LEASE_DELETED = -1


def renew_lease(client: redis.Redis, unit: Unit, ids: Sequence[str], pipe: Any = None,
                fresh_ms: int = 0) -> list[int]:
    """Make sure the `ids` of `unit`'s stream still pending in its group and owned by its
    consumer hold a lease: those idle
    `fresh_ms` ms or longer get their idle time reset to 0 (keeping their delivery counts);
    younger ones already hold one. Acks those deleted from the stream (found on renewal).

    `ids` must be in ascending ID order (``recovery.redis_io.streams.stream_id_key``). Reply
    (without pipe): one integer per ID, in order: ``LEASE_RENEWED`` (1), ``LEASE_LOST`` (0:
    no longer pending or another owner), ``LEASE_DELETED`` (-1: deleted upstream, now
    acked).
    """
    return _call(client, "lease_owned", [unit.stream], [unit.group, unit.consumer, fresh_ms,
                                                        *ids], pipe)  # type: ignore[no-any-return]


def handler_outlasts_lease(min_idle_ms: int, handler_timeout_s: float | None) -> bool:
    """Whether a handler call may still run once an entry handed to it has been idle
    `min_idle_ms` (when another run, or a consumer claiming with that min-idle time, may take
    it): a lease reading serves the calls of the next ``LEASE_FRESH_S``, so an entry renewed
    by it can reach a call that late. The timeout must therefore be shorter than
    `min_idle_ms` by more than ``LEASE_FRESH_S``. No timeout: False (half of `min_idle_ms`
    is the budget then, :func:`fresh_lease_ms`)."""
    if handler_timeout_s is None:
        return False
    return handler_timeout_s * 1000 + LEASE_FRESH_S * 1000 >= min_idle_ms


def fresh_lease_ms(min_idle_ms: int, handler_timeout_s: float | None) -> int:
    """How long after a claim or renewal an entry needs no renewal before a handler call:
    the call must end before the entry has been idle `min_idle_ms` (when another run may
    claim it). With a timeout that leaves min_idle minus the timeout; without one, half."""
    budget_ms = handler_timeout_s * 1000 if handler_timeout_s is not None else min_idle_ms / 2
    return max(0, int(min_idle_ms - budget_ms))


def delete_empty_consumers(client: redis.Redis,
                           groups: Sequence[tuple[str, str, Sequence[str]]],
                           pipe: Any = None) -> Any:
    """For each (stream, group, consumers) of `groups`: read the group's PEL summary once,
    then delete those of `consumers` that own no pending entry, all in one atomic script
    call (the streams are its keys: on a Redis Cluster give groups of one slot).

    Reply (without pipe): per group, ``[summary, r_1, ..., r_n]``. `summary` is the raw
    ``XPENDING stream group`` reply as read before the deletions, ``[total, first id, last
    id, [[consumer, count], ...]]`` (ids and the list None when nothing is pending; names
    and counts as bytes), or the error its stream or group answered (NOGROUP, WRONGTYPE: a
    ResponseError in its place); `r_j` per consumer, in order: 1 deleted, 0 kept (it owns
    pending entries), or that same error."""
    args: list[Any] = []
    for _, group, consumers in groups:
        args += [group, len(consumers), *consumers]
    return _call(client, "delete_empty_consumer", [g[0] for g in groups], args, pipe)
