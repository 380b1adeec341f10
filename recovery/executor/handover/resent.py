"""Dead-letter moves whose call was sent again after its reply was lost (a timeout, a reset:
the client's retry policy, counted by ``recovery.redis_io.retries``).

The script moves an entry only while it is pending for the job's consumer, so the second
sending answers 0 (``MOVED_NOT_OURS``) for what the first one moved. After such a retry each
0 is read again (``recovery.redis_io.own_letters``): an entry still pending was not moved; one
that is not has been moved by this run when its dead-letter stream holds this run's letter of
it, written since the call was sent (its ID is the letter's; with ``delete_acked``, the
source entry's absence says XACKDEL deleted it); otherwise the job cannot tell it from an
ack by another consumer and reports it ``UNCERTAIN``. Reads only: nothing is written.

The requeue and reassign calls (``recovery.executor.handover.modes``) answer 0 the same way
for what a lost first sending did; their copies and claims carry no run ID, so each 0 is
read again by its entry's owner only (:func:`reread_zeros`): still pending -> for whom;
pending for none -> ``UNCERTAIN``.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any, NamedTuple

import redis

from recovery.redis_io.own_letters import (
    pending_ids,
    pending_owners,
    present_ids,
    run_letters,
    server_time_ms,
)
from recovery.redis_io.retries import failed_attempts
from recovery.redis_io.round_trips import ScriptCall, run_script_calls
from recovery.redis_io.scripts import ACKDEL_DELETED, ACKDEL_KEPT, MOVED_NOT_OURS
from recovery.schemas import UNCERTAIN_REASON_PREFIX

UNCERTAIN = "uncertain"  # a status in place of the script's 0: moved or acked, unknown
REASON_UNCERTAIN = UNCERTAIN_REASON_PREFIX + (
    "no longer pending after the dead-letter call was sent again (its reply was "
    "lost), and no letter of this run for it was found in its dead-letter stream: moved by "
    "the lost call or acked by another consumer; look for its x-original-id there")
REASON_UNCERTAIN_REQUEUE = UNCERTAIN_REASON_PREFIX + (
    "no longer pending after the requeue call was sent again (its reply was lost): "
    "requeued by the lost call (a copy of its fields with x-recovery-deliveries in the "
    "requeue target) or acked by another consumer")
REASON_UNCERTAIN_REASSIGN = UNCERTAIN_REASON_PREFIX + (
    "no longer pending after the reassign call was sent again (its reply was lost): "
    "reassigned by the lost call and acked since by its new owner, or acked by another "
    "consumer")
CLOCK_MARGIN_MS = 1000  # the server's clock read after the call, less this and the wait
Pair = tuple[Any, Any]  # (DeadLetterJob, the script's reply element)


def recheck_resent(client: redis.Redis, pairs: list[Pair], sent_at: float,
                   where: Callable[[Any], tuple[str, str, str, str]], run_id: str,
                   delete_acked: bool) -> list[Pair]:
    """`pairs` with each 0 read again as the module says: the letter's ID (``[ID, code]``
    with `delete_acked`), 0, or ``UNCERTAIN``. `sent_at`: ``time.monotonic()`` before the
    calls were sent; `where(job)`: its (stream, group, dead-letter stream, entry ID)."""
    found: dict[int, Any] = {}
    for (stream, group, dlq), jobs in _zeros_by_place(pairs, where).items():
        waited_ms = int((time.monotonic() - sent_at) * 1000)
        since = server_time_ms(client, dlq) - waited_ms - CLOCK_MARGIN_MS
        left = set(jobs) - pending_ids(client, stream, group, jobs)
        letters = run_letters(client, dlq, since, stream, group, run_id, left) if left else {}
        kept = present_ids(client, stream, letters) if delete_acked and letters else set()
        for entry_id in left:
            letter: Any = letters.get(entry_id)
            if letter is not None and delete_acked:
                letter = [letter, ACKDEL_KEPT if entry_id in kept else ACKDEL_DELETED]
            found[id(jobs[entry_id])] = UNCERTAIN if letter is None else letter
    return _replaced(pairs, found)


def _is_zero(status: Any) -> bool:
    return isinstance(status, int) and not isinstance(status, bool) and status == MOVED_NOT_OURS


def _zeros_by_place(pairs: list[Pair], where: Callable[[Any], tuple[str, ...]]
                    ) -> dict[tuple[str, ...], dict[str, Any]]:
    """The jobs whose status is 0, by their place (``where(job)`` less its last element, the
    entry ID), each place's jobs by entry ID."""
    zeros: dict[tuple[str, ...], dict[str, Any]] = defaultdict(dict)
    for job, status in pairs:
        if _is_zero(status):
            *place, entry_id = where(job)
            zeros[tuple(place)][entry_id] = job
    return zeros


def _replaced(pairs: list[Pair], found: dict[int, Any]) -> list[Pair]:
    """`pairs` with the status of each job in `found` (by ``id(job)``) replaced."""
    return [(job, found.get(id(job), status)) for job, status in pairs]


class PendingFor(NamedTuple):
    """A 0 read again: the entry is still pending, for `consumer`."""

    consumer: str


def sent_noting_retries(client: redis.Redis, calls: list[ScriptCall]
                        ) -> tuple[list[Pair], bool]:
    """``run_script_calls(client, calls)``, and whether a call was sent again (the client's
    count of failed attempts grew: a reply lost, its command perhaps run)."""
    failures = failed_attempts(client)
    pairs = run_script_calls(client, calls)
    return pairs, failed_attempts(client) != failures


def reread_zeros(client: redis.Redis, pairs: list[Pair],
                 where: Callable[[Any], tuple[str, str, str]]) -> list[Pair]:
    """`pairs` with each 0 read again (one ``XPENDING <stream> <group> <id> <id> 1`` each,
    pipelined per stream and group): :class:`PendingFor` its owner when still pending,
    else ``UNCERTAIN``. `where(job)`: its (stream, group, entry ID)."""
    found: dict[int, Any] = {}
    for (stream, group), jobs in _zeros_by_place(pairs, where).items():
        owners = pending_owners(client, stream, group, jobs)
        for entry_id, job in jobs.items():
            owner = owners.get(entry_id)
            found[id(job)] = UNCERTAIN if owner is None else PendingFor(owner)
    return _replaced(pairs, found)
