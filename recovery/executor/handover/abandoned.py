"""Handler calls abandoned at ``handler.timeout_s``, and the lease of their entries while
they run.

Python cannot stop a thread: a call that times out keeps running in its worker process
(``recovery.handlers``), and may still do its work. Its entries therefore stay leased to
the job's consumer while it runs: renewed at once, then every third of ``min_idle_ms``
(``lease_owned.lua``: only entries still pending and owned by that consumer; idle time
reset, delivery count kept), so no other run and no consumer claiming with that idle time
takes one while its call may still succeed, and, under per-key order, the later entries
of its key stay held behind it (``recovery.redis_io.held_keys``: an entry pending on
another run's consumer and not idle).

The renewal at once runs in the task, on a connection of the keeper's own, and fails the
task as any of its commands does, and so does opening the thread's connection (Redis away,
the user's ACL refusing the script's XCLAIM: the job's usual one line once the retries are
spent); the failed attempt ends its worker process and the call with it. Every later
renewal runs in a daemon thread, on that connection, whose every wait on Redis (a
connection, a reply, the pause before redis-py's retry) is bounded by the period,
however long ``redis.socket_timeout_s`` is: a renewal whose reply stalls is sent again on a
new connection, and each sending renews in Redis. A renewal that fails (Redis restarted,
away or busy with a script) is tried again every ``RETRY_S`` while the call runs, so a
Redis back within ``min_idle_ms`` finds the entries leased again. The keeping ends when the
call ends, or when no entry is left to keep (a unit whose stream or group is gone keeps
nothing); it ends with the worker process too, which ends the call. Nothing of the thread
raises into the task.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import replace

import redis

from recovery.params import RedisParams, Unit
from recovery.redis_io.error_codes import unit_vanished
from recovery.redis_io.redis_conn import RedisConn
from recovery.redis_io.scripts import LEASE_RENEWED, renew_lease

log = logging.getLogger(__name__)
RETRY_S = 0.5  # the wait before a failed renewal is tried again (s), at most the period
MIN_PERIOD_S = 0.05  # the shortest time between two renewals (s)

Held = dict[Unit, list[str]]  # each unit's entry IDs, ascending


def keep_leased(redis_params: RedisParams, held: Held, call: threading.Thread,
                min_idle_ms: int) -> None:
    """Keep `held` leased while `call` runs: renewed at once here, on a connection of its
    own (from `redis_params`), then every third of `min_idle_ms` ms by a daemon thread, on
    another, opened here, whose waits are bounded by that period (:func:`within`),
    until `call` ends. The renewal at once and the opening of the thread's connection are
    commands of the task: what they raise (redis-py's errors; the job's typed error when no
    connection opens) fails the task."""
    if not call.is_alive():
        return
    conn = RedisConn.open(redis_params)
    try:
        held = _renew(conn.client, held)
    finally:
        conn.close()
    if held:
        period_s = max(MIN_PERIOD_S, min_idle_ms / 3000)
        keeper = RedisConn.open(within(redis_params, period_s))
        threading.Thread(target=_keep, args=(keeper, held, call, period_s),
                         name="recovery-lease-keeper", daemon=True).start()


def within(params: RedisParams, bound_s: float) -> RedisParams:
    """`params` whose connect and reply waits are each at most `bound_s` seconds (and so the
    pauses between redis-py's retries: ``recovery.redis_io.redis_conn.connect``): a renewal
    whose reply stalls, or whose connection is not answered, is given up and sent again on a
    new connection (each sending renews in Redis) before the lease lapses, however long
    ``redis.socket_timeout_s`` is."""
    return replace(params, connect_timeout_s=min(params.connect_timeout_s, bound_s),
                   socket_timeout_s=min(params.socket_timeout_s, bound_s))


def _renew(client: redis.Redis, held: Held) -> Held:
    """One renewal of every unit's entries: those still the job's (renewed). A unit whose
    stream or group is gone (or replaced) is dropped: nothing of it is left to keep."""
    kept: Held = {}
    for unit, ids in held.items():
        try:
            replies = renew_lease(client, unit, ids)
        except redis.ResponseError as exc:
            if unit_vanished(exc):
                continue
            raise
        still = [i for i, r in zip(ids, replies, strict=True) if r == LEASE_RENEWED]
        if still:
            kept[unit] = still
    return kept


def _keep(conn: RedisConn, held: Held, call: threading.Thread, period_s: float) -> None:
    """The keeper thread's loop: renew `held` every `period_s` s while `call` runs, every
    ``RETRY_S`` (at most `period_s`) after a failed renewal, whatever failed (an ACL changed
    meanwhile too: it may be put back); the first failure of a streak is logged."""
    failing, wait_s = False, period_s
    try:
        while True:
            call.join(wait_s)  # the next renewal, unless the call ends first
            if not (held and call.is_alive()):
                return
            try:
                held = _renew(conn.client, held)
                failing, wait_s = False, period_s
            except Exception as exc:  # a keeper never raises into the worker
                if not failing:
                    log.warning("renewing the lease of %s entries of an abandoned handler "
                                "call failed (%s): tried again every %s s while it runs",
                                _count(held), type(exc).__name__, min(period_s, RETRY_S))
                failing, wait_s = True, min(period_s, RETRY_S)
    finally:
        conn.close()


def _count(held: Held) -> int:
    """How many entries `held` names."""
    return sum(len(ids) for ids in held.values())
