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

The renewal at once runs in the task, on a connection of the keeper's own: the Redis user's
ACL refusing it (the script's XCLAIM) is raised there, and stops the job with its one line as
any command it needs and may not run does. Every later renewal runs in a daemon thread; a
renewal that fails (Redis restarted, away or busy with a script) is tried again every
``RETRY_S`` while the call runs, so a Redis back within ``min_idle_ms`` finds the entries
leased again. The keeping ends when the call ends, or when no entry is left to keep (a unit
whose stream or group is gone keeps nothing); it ends with the worker process too, which
ends the call. Nothing of the thread raises into the task.
"""

from __future__ import annotations

import logging
import threading

import redis

from recovery.params import RedisParams, Unit
from recovery.redis_io.error_codes import unit_vanished
from recovery.redis_io.redis_conn import RedisConn, refused_by_acl
from recovery.redis_io.scripts import LEASE_RENEWED, renew_lease

log = logging.getLogger(__name__)
RETRY_S = 0.5  # the wait before a failed renewal is tried again (s), at most the period
MIN_PERIOD_S = 0.05  # the shortest time between two renewals (s)

Held = dict[Unit, list[str]]  # each unit's entry IDs, ascending


def keep_leased(redis_params: RedisParams, held: Held, call: threading.Thread,
                min_idle_ms: int) -> None:
    """Keep `held` leased while `call` runs: renewed at once here, then every third of
    `min_idle_ms` ms by a daemon thread, on a connection of their own (from `redis_params`),
    until `call` ends. Raises only the renewal's ACL refusal (a redis-py ResponseError)."""
    if not call.is_alive():
        return
    period_s = max(MIN_PERIOD_S, min_idle_ms / 3000)
    conn, held, renewed = _renew_at_once(redis_params, held)
    threading.Thread(target=_keep, name="recovery-lease-keeper", daemon=True,
                     args=(redis_params, conn, held, call,
                           period_s, period_s if renewed else min(period_s, RETRY_S))).start()


def _renew_at_once(redis_params: RedisParams, held: Held
                   ) -> tuple[RedisConn | None, Held, bool]:
    """The first renewal: (the keeper's connection or None, what is left to keep, whether
    it was renewed). An ACL refusal is raised; any other failure is the thread's to retry."""
    conn = None
    try:
        conn = RedisConn.open(redis_params)
        return conn, _renew(conn.client, held), True
    except redis.ResponseError as exc:
        if refused_by_acl(exc):
            if conn is not None:
                conn.close()
            raise
    except Exception:  # the keeper's thread tries again
        pass
    return conn, held, False


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


def _keep(redis_params: RedisParams, conn: RedisConn | None, held: Held,
          call: threading.Thread, period_s: float, wait_s: float) -> None:
    """The keeper thread's loop: wait `wait_s` s (or until `call` ends), renew `held`, and
    again every `period_s` s while `call` runs, every ``RETRY_S`` (at most `period_s`) after
    a failed renewal."""
    failing = wait_s < period_s
    try:
        while True:
            call.join(wait_s)  # the next renewal, unless the call ends first
            if not (held and call.is_alive()):
                return
            try:
                conn = conn or RedisConn.open(redis_params)
                held = _renew(conn.client, held)
                failing, wait_s = False, period_s
            except Exception as exc:  # a keeper never raises into the worker
                if not failing:
                    log.warning("renewing the lease of %s entries of an abandoned handler "
                                "call failed (%s): tried again every %s s while it runs",
                                _count(held), type(exc).__name__, min(period_s, RETRY_S))
                failing, wait_s = True, min(period_s, RETRY_S)
    finally:
        if conn is not None:
            conn.close()


def _count(held: Held) -> int:
    """How many entries `held` names."""
    return sum(len(ids) for ids in held.values())
