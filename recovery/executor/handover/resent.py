"""Dead-letter moves whose call was sent again after its reply was lost (a timeout, a reset:
the client's retry policy, counted by ``recovery.redis_io.retries``).

The script moves an entry only while it is pending for the job's consumer, so the second
sending answers 0 (``MOVED_NOT_OURS``) for what the first one moved. After such a retry each
0 is read again (``recovery.redis_io.own_letters``): an entry still pending was not moved; one
that is not has been moved by this run when its dead-letter stream holds this run's letter of
it, written since the call was sent (its ID is the letter's; with ``delete_acked``, the
source entry's absence says XACKDEL deleted it); otherwise the job cannot tell it from an
ack by another consumer and reports it ``UNCERTAIN``. Reads only: nothing is written.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import redis

from recovery.redis_io.own_letters import pending_ids, present_ids, run_letters, server_time_ms
from recovery.redis_io.scripts import ACKDEL_DELETED, ACKDEL_KEPT, MOVED_NOT_OURS
from recovery.schemas import UNCERTAIN_REASON_PREFIX

UNCERTAIN = "uncertain"  # a status in place of the script's 0: moved or acked, unknown
REASON_UNCERTAIN = UNCERTAIN_REASON_PREFIX + (
    "no longer pending after the dead-letter call was sent again (its reply was "
    "lost), and no letter of this run for it was found in its dead-letter stream: moved by "
    "the lost call or acked by another consumer; look for its x-original-id there")
CLOCK_MARGIN_MS = 1000  # the server's clock read after the call, less this and the wait
Pair = tuple[Any, Any]  # (DeadLetterJob, the script's reply element)


def recheck_resent(client: redis.Redis, pairs: list[Pair], sent_at: float,
                   where: Callable[[Any], tuple[str, str, str, str]], run_id: str,
                   delete_acked: bool) -> list[Pair]:
    """`pairs` with each 0 read again as the module says: the letter's ID (``[ID, code]``
    with `delete_acked`), 0, or ``UNCERTAIN``. `sent_at`: ``time.monotonic()`` before the
    calls were sent; `where(job)`: its (stream, group, dead-letter stream, entry ID)."""
    zeros: dict[tuple[str, str, str], dict[str, Any]] = defaultdict(dict)
    for job, status in pairs:
        if _is_zero(status):
            stream, group, dlq, entry_id = where(job)
            zeros[(stream, group, dlq)][entry_id] = job
    found: dict[int, Any] = {}
    for (stream, group, dlq), jobs in zeros.items():
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
    return [(job, found.get(id(job), status)) for job, status in pairs]


def _is_zero(status: Any) -> bool:
    return isinstance(status, int) and not isinstance(status, bool) and status == MOVED_NOT_OURS
