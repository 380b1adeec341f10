"""One claim step under a backoff schedule: the ``claim_due.lua`` script call, which chooses
and claims the due entries atomically (XCLAIM ... JUSTID: IDs only), and the XRANGE that
reads their fields, sent behind it in the same write (or, where the due entries are spread
out, a read of each).

The script answers IDs rather than entries because turning every claimed entry's fields into
Lua tables and back costs Redis more than the claim itself. One XRANGE of `count` entries
from the step's cursor holds the fields of every claimed entry when the pending entries lie
side by side in the stream (a stuck backlog usually does); any claimed ID it missed (spread
out entries, or one deleted just now) is read on its own (``XRANGE id id``, pipelined).
A claimed ID the stream no longer holds is reported deleted, as XAUTOCLAIM's path does.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import redis

from recovery.params import Unit
from recovery.redis_io.autoclaim import ClaimBatch
from recovery.redis_io.round_trips import script_replies
from recovery.redis_io.scripts import scripts_for
from recovery.redis_io.streams import END_CURSOR, ID, FlatFields, as_str, fetch_flats, next_id


@dataclass(frozen=True)
class DueStep:
    """What one step under a backoff schedule reads: up to `count` PEL rows idle at least
    `min_idle_ms` ms from `cursor` to `end` (IDs, inclusive); `schedule`, the schedule as the
    script takes it (``recovery.executor.claim.backoff.schedule_args``)."""

    min_idle_ms: int
    cursor: str
    count: int
    schedule: Sequence[Any]
    end: str = "+"


def claim_due_batch(client: redis.Redis, unit: Unit, step: DueStep, ahead: int | None = None,
                    shared: tuple[str, str] | None = None) -> ClaimBatch:
    """One step of a claim under a backoff schedule (``claim_due.lua``, atomic): the PEL rows
    `step` reads of `unit`'s stream and group, the due ones claimed for its consumer.

    The same ClaimBatch as ``autoclaim.claim_batch`` (XAUTOCLAIM): `before` holds every row
    read, claimed or not; the next cursor is the ID after the last row read, ``0-0`` once a
    read came back short. Also `not_due` and `due_in_ms`. `ahead`: how many stream entries
    from `cursor` on to read behind the script (default `count`; 0: none, each claimed
    entry is read on its own). Raises the error the server answered (NOGROUP, WRONGTYPE,
    ...).

    With `shared` (the keys of a cursor several tasks claim one PEL with, and of the list of
    ranges this task's part took: ``claim_due.lua``), the step reads from where the cursor
    stands instead of `cursor` and moves it on; the batch's `taken` is the range it took
    (None: the cursor was done, nothing read). The claimed entries' fields are then read
    after the script (one XRANGE from the first of them).
    """
    sha = scripts_for(client)["claim_due"].sha
    stream, cursor, count, end = unit.stream, step.cursor, step.count, step.end
    keys = (stream,) if shared is None else (stream, *shared)
    args = (unit.group, unit.consumer, step.min_idle_ms, cursor, count, *step.schedule, end)
    queues = [lambda pipe: pipe.evalsha(sha, len(keys), *keys, *args)]
    if shared is None and (ahead is None or ahead > 0):
        queues.append(lambda pipe: pipe.execute_command("XRANGE", stream, cursor, end, "COUNT",
                                                        ahead or count))
    reply, *read = script_replies(client, queues)
    if isinstance(reply, Exception):
        raise reply
    rows, own, claimed, deleted, unresolved, not_due, due_in, taken = reply
    if shared is not None and claimed:
        read = [client.execute_command("XRANGE", stream, claimed[0], "+", "COUNT", count)]
    fields = _claimed_fields(client, stream, claimed,
                             read[0] if read and not isinstance(read[0], Exception) else [])
    found = [i for i in claimed if fields[i] is not None]
    next_cursor = next_id(as_str(rows[-1][ID])) if len(rows) >= count else END_CURSOR
    return ClaimBatch(next_cursor, found, [fields[i] for i in found],  # type: ignore[misc]
                      [*deleted, *(i for i in claimed if fields[i] is None)],
                      {r[ID]: r for r in rows}, own[0][ID] if own else None,
                      int(unresolved), int(not_due), int(due_in) if due_in >= 0 else None,
                      taken=None if shared is None or taken == b"done" else as_str(taken))


def taken_range(taken: str) -> tuple[str, str]:
    """A range a shared claim's step took (``claim_due.lua``: ``<start> <last>``, start
    ``0-0`` or an exclusive ``(<id>``, last an ID or ``+``) as (first ID, last ID or ``+``),
    both inclusive."""
    start, last = taken.split(" ")
    return (next_id(start[1:]) if start.startswith("(") else start), last


def _claimed_fields(client: redis.Redis, stream: str, claimed: Sequence[bytes],
                    ahead: Sequence[Any]) -> dict[bytes, FlatFields | None]:
    """The flat fields of each claimed ID: from `ahead` (an XRANGE reply: [id, [field,
    value, ...]] entries), else read on its own; None for an ID gone from the stream."""
    read = {entry[0]: entry[1] for entry in ahead}
    read.update(fetch_flats(client, stream, [i for i in claimed if i not in read]))
    return {i: read[i] for i in claimed}
