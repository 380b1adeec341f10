"""Handler calls abandoned at ``handler.timeout_s``, and the lease of their entries while
they run.

Python cannot stop a thread: a call that times out keeps running in its worker process
(``recovery.handlers``), and may still do its work. Its entries therefore stay leased to
the job's consumer while it runs: renewed at once, then every third of ``min_idle_ms``
(``lease_owned.lua``: only entries still pending and owned by that consumer; idle time
reset, delivery count kept), so no other run and no consumer claiming with that idle time
takes one while its call may still succeed, and, under per-key order, the later entries
of its key stay held behind it (``recovery.redis_io.held_keys``: an entry pending on
another run's consumer and not idle). The keeping ends when the call ends, when no entry
is left to keep (a unit whose stream or group is gone keeps nothing), or after
``GIVE_UP_ERRORS`` Redis errors in a row; it ends with the worker process too, which ends
the call. Nothing of it raises into the task.
"""

from __future__ import annotations

import logging
import threading

import redis

from recovery.params import RedisParams, Unit
from recovery.redis_io.error_codes import unit_vanished
from recovery.redis_io.redis_conn import RedisConn
from recovery.redis_io.scripts import LEASE_RENEWED, renew_lease

log = logging.getLogger(__name__)
GIVE_UP_ERRORS = 3  # renewals failing in a row (Redis away) before the keeping stops
MIN_PERIOD_S = 0.05  # the shortest time between two renewals (s)

Held = dict[Unit, list[str]]  # each unit's entry IDs, ascending


def keep_leased(redis_params: RedisParams, held: Held, call: threading.Thread,
                min_idle_ms: int) -> None:
    """Keep `held` leased while `call` runs: a daemon thread with a connection of its own
    (from `redis_params`) renews them at once, then every third of `min_idle_ms` ms, until
    `call` ends. Nothing is raised here: the task goes on whatever Redis answers."""
    if call.is_alive():
        period_s = max(MIN_PERIOD_S, min_idle_ms / 3000)
        threading.Thread(target=_keep, args=(redis_params, held, call, period_s),
                         name="recovery-lease-keeper", daemon=True).start()


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


def _keep(redis_params: RedisParams, held: Held, call: threading.Thread,
          period_s: float) -> None:
    """The keeper thread's loop: renew `held` at once, then every `period_s` s while `call`
    runs."""
    errors = 0
    conn: RedisConn | None = None
    try:
        while held and call.is_alive():
            try:
                conn = conn or RedisConn.open(redis_params)
                held = _renew(conn.client, held)
                errors = 0
            except Exception as exc:  # a keeper never raises into the worker
                errors += 1
                if errors >= GIVE_UP_ERRORS:
                    log.warning("stopped keeping the lease of %s entries of an abandoned "
                                "handler call: %s", _count(held), type(exc).__name__)
                    return
            call.join(period_s)  # the next renewal, unless the call ends first
    finally:
        if conn is not None:
            conn.close()


def _count(held: Held) -> int:
    """How many entries `held` names."""
    return sum(len(ids) for ids in held.values())

