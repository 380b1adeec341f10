"""The hand-over in per-key order (``order.key_field``), on an executor: a batch of claimed
entries sorted by (stream, group, key, ID) is handed over in waves, the first entry of every
key not held, then the next, and so on, so the handler never gets an entry before the
previous entry of its key succeeded in this run, and never two entries of one key in a call.

After each wave, each key's head decides: acked (``reprocessed``), deleted upstream, or
dead-lettered lets the key go on (unless ``order.dead_letter_releases`` is false: then the
move also records the key as held, ``recovery.redis_io.key_holds``, and it holds the key); a
head that failed, or is no longer the job's but still pending (another consumer took it),
holds the key: every later entry of that key in this run is not handed over, reported
``held`` with the head's ID in its reason, and stays pending on the job's consumer. An entry
the driver found held back (an older entry of its key pending elsewhere), or one after a head
recorded as dead-lettered before (``blocked`` reasons), holds its key from the start. Other
keys go on.

Each wave is one ordinary hand-over (``modes.handler``): dead-letter moves of the heads over
the limit, then lease, handler calls of ``handler.batch_size`` and acks.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

import pyarrow as pa
import redis

from recovery.executor.claimed import Claimed, carried_deliveries
from recovery.executor.faults import maybe_fail
from recovery.executor.handover.dead_letter import DeadLetterJob, dead_letter, over_limit
from recovery.executor.handover.lease import REASON_DELETED, REASON_GONE
from recovery.executor.handover.modes.handler import MODE as HANDLER
from recovery.executor.handover.ready import clear_deleted, ready
from recovery.executor.handover.routed import RoutedBatch
from recovery.params import JobParams
from recovery.redis_io.held_keys import unclaim_held
from recovery.redis_io.round_trips import each
from recovery.redis_io.streams import OWNER, pending_command, shown
from recovery.schemas import Action, DeathReason, Route

KeyT = tuple[str, str, bool, bytes]  # (stream, group, keyless, key or ID): one ordering key
STAYS = "; stays pending"


def apply_in_order(client: redis.Redis, params: JobParams, claimed: Claimed,
                   keys: Sequence[KeyT], blocked: Sequence[str | None],
                   carried: dict[KeyT, str], keyless: Sequence[str] = ()) -> pa.RecordBatch:
    """Route, dead-letter and hand over `claimed` (sorted by key, then ID) key by key in ID
    order; return its REPORT batch. `keys[i]`: row i's ordering key; `blocked[i]`: why row i
    is held from the start, or None. `carried`: the keys held in the batch before (a key
    may go on into this batch), replaced by those held at the end of this one. `keyless`:
    per row, the key field it lacks where it is to be dead-lettered for that
    (``order.missing_key = dead_letter``), else ""."""
    rb = RoutedBatch(claimed, params.max_deliveries)
    if params.order is not None and not params.order.dead_letter_releases:
        rb.order_keys = [None if k[2] else k[3] for k in keys]  # a moved head holds its key
    routes = rb.by_route()
    for i in routes[Route.GONE]:
        rb.set(i, Action.SKIPPED, REASON_GONE)
    clear_deleted(client, rb, routes[Route.DELETED])
    dead_letter(client, params, rb, [
        DeadLetterJob(i, DeathReason.NO_ORDER_KEY, f"no {name!r} field to order it by")
        for i, name in enumerate(keyless) if name and rb.action[i] is None])
    # Every row takes its turn, those already decided too (deleted upstream; no longer the
    # job's since the claim: it may be pending on someone else, which holds its key).
    queues: dict[KeyT, deque[int]] = {}
    for i in range(len(claimed)):
        queues.setdefault(keys[i], deque()).append(i)
    held: dict[KeyT, str] = {}

    def hold(key: KeyT, why: str) -> None:
        for i in queues.pop(key):
            if rb.action[i] is None:
                rb.set(i, Action.HELD, why + STAYS)
        held[key] = why

    for key in [k for k in queues if k in carried]:
        hold(key, carried[key])
    wave = 0
    while queues:
        for key in [k for k, q in queues.items()
                    if blocked[q[0]] is not None and rb.action[q[0]] is None]:
            hold(key, blocked[queues[key][0]])  # type: ignore[arg-type]
        heads = [q.popleft() for q in queues.values()]
        if not heads:
            break
        _hand_over(client, params, rb, heads)
        wave += 1
        maybe_fail("ordered", wave)  # after a wave's side effects (tests of task retries)
        holds = _holding(client, params, rb, heads, keys)
        for i in heads:
            key = keys[i]
            if i in holds:
                hold(key, holds[i])
            elif not queues[key]:
                del queues[key]
    carried.clear()
    carried.update(held)
    _unclaim(client, rb)
    return rb.report()


def _unclaim(client: redis.Redis, rb: RoutedBatch) -> None:
    """Give the held entries their delivery counts back as they were before this run's
    claim (``recovery.redis_io.held_keys.unclaim_held``): the claim delivered them to no
    application, and a key held for several runs must not push them to the limit. Entries
    whose fields the claim did not read (taken back) keep theirs."""
    held = [i for i, action in enumerate(rb.action) if action == Action.HELD
            and rb.fields[i] is not None and rb.delivery_count[i] is not None]
    for unit, rows in rb.by_unit(held, ordered=True).items():
        _, deleted = unclaim_held(client, unit, [
            (rb.id[i], rb.delivery_count[i] -  # type: ignore[operator]
             carried_deliveries(rb.fields[i])) for i in rows])
        gone = set(deleted)
        for i in rows:
            if rb.id[i] in gone:  # deleted upstream while held: its PEL slot acked
                rb.action[i] = None  # held -> deleted: its one outcome
                rb.set(i, Action.DELETED, REASON_DELETED)


def _hand_over(client: redis.Redis, params: JobParams, rb: RoutedBatch, heads: list[int]
               ) -> None:
    """One wave: the open heads over the limit dead-lettered, the others handed to the
    handler (heads decided before the waves keep their outcome)."""
    heads = [i for i in heads if rb.action[i] is None]
    dead_letter(client, params, rb,
                over_limit(rb, [i for i in heads if rb.route[i] == Route.DEAD_LETTER]))
    rows = ready(client, params, rb, [i for i in heads if rb.route[i] == Route.HANDLE])
    HANDLER.hand_over(client, params, rb, rows, None)


def _holding(client: redis.Redis, params: JobParams, rb: RoutedBatch, heads: list[int],
             keys: Sequence[KeyT]) -> dict[int, str]:
    """The heads that hold their keys, each with why: failed, dead-lettered (where
    ``order.dead_letter_releases`` is false), or no longer the job's but still pending on
    another consumer, or skipped and left pending (a refused dead-letter move; one XPENDING
    of its ID, pipelined: an entry acked by someone is done)."""
    releases = params.order is None or params.order.dead_letter_releases
    holds: dict[int, str] = {}
    gone = []
    for i in heads:
        action, head = rb.action[i], rb.id[i]
        if action == Action.FAILED:
            holds[i] = f"held behind {head} of its key, which failed in this run"
        elif action == Action.DEAD_LETTERED and not releases and not keys[i][2]:
            holds[i] = (f"held behind {head} of its key, dead-lettered as "
                        f"{rb.dead_letter_id[i]} in this run (order.dead_letter_releases = "
                        "false) until an operator releases it")
        elif action == Action.SKIPPED:
            gone.append(i)  # no longer the job's, or left pending (a refused dead-letter move)
    replies = each(client, [pending_command(rb.stream[i], rb.group[i], rb.id[i], rb.id[i], 1)
                            for i in gone])
    for i, reply in zip(gone, replies, strict=True):
        if isinstance(reply, list) and reply:
            if rb.reason[i] == REASON_GONE:
                owner = shown(reply[0][OWNER])
                holds[i] = (f"held behind {rb.id[i]} of its key, pending on consumer "
                            f"{owner!r} since this run claimed it")
            else:
                holds[i] = (f"held behind {rb.id[i]} of its key, which stays pending: "
                            f"{rb.reason[i]}")
    return holds
