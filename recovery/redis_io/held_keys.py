"""Reads for per-key order across runs (``recovery.executor.ordered``): which pending entries
of a group the run did not claim, and their fields (their ordering keys).

A run claims only idle entries; an older entry of a key that a live consumer (or a killed
run) still holds, or that is not idle yet, must hold that key's later entries back. XPENDING
gives the IDs but not the keys, so the entries' fields are read too (XRANGE id id). Who owns
what is read as one snapshot (MULTI/EXEC: ``pending_elsewhere``), so an entry moving between
two consumers during the read is never missed.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from itertools import chain
from typing import Any

import redis

from recovery.params import Unit, is_job_consumer
from recovery.redis_io.error_codes import unit_vanished
from recovery.redis_io.round_trips import each, in_transaction
from recovery.redis_io.scripts import scripts_for
from recovery.redis_io.streams import (
    ID,
    OWNER,
    Fields,
    fetch_entries,
    name_text,
    pending_command,
    shown,
    stream_id_key,
)

log = logging.getLogger(__name__)
UNCLAIM_CHUNK = 500  # entries per unclaim_held.lua call
SNAPSHOT_TRIES = 5  # pending_elsewhere's snapshots at most, while consumers keep appearing
UNREAD = "0-0"  # the bound where a consumer's entries were not read at all: every entry is after
PendingElsewhere = list[tuple[str, str, Fields | None]]  # (id, owner, fields or None: deleted)


def not_this_runs(name: str | bytes, own_stem: str) -> bool:
    """Whether consumer `name` is not one of this run's (``<prefix>-<run id>-<part>``): a
    name that only starts with `own_stem` (another run's whose ID extends this one's, such
    as ``nightly-2`` for ``nightly``) is another's, and so is one that is not UTF-8."""
    if isinstance(name, bytes):
        return True
    return not is_job_consumer(name, own_stem)


def consumers_with_pending(client: redis.Redis, stream: str, group: str
                           ) -> list[str | bytes]:
    """The names of `group`'s consumers that own pending entries (XINFO CONSUMERS; a name
    that is not UTF-8 as its bytes, to be sent back as it came); [] when the stream or group
    is gone."""
    return groups_consumers_with_pending(client, [(stream, group)])[0]


def groups_consumers_with_pending(client: redis.Redis, groups: Sequence[tuple[str, str]]
                                  ) -> list[list[str | bytes]]:
    """For each (stream, group) of `groups`, its consumers that own pending entries (XINFO
    CONSUMERS, pipelined); [] for one whose stream or group is gone."""
    found: list[list[str | bytes]] = []
    for reply in each(client, [("XINFO", "CONSUMERS", s, g) for s, g in groups]):
        if isinstance(reply, Exception):
            if unit_vanished(reply):
                found.append([])
                continue
            raise reply
        found.append(_with_pending(reply))
    return found


def _with_pending(reply: object) -> list[str | bytes]:
    """The consumer names with pending entries in an XINFO CONSUMERS reply (rows of flat
    pairs, or of dicts where redis-py parsed them: inside a transaction)."""
    names: list[str | bytes] = []
    for row in reply:  # type: ignore[attr-defined]
        pairs = row.items() if isinstance(row, dict) else zip(row[0::2], row[1::2], strict=True)
        info = {(k.decode() if isinstance(k, bytes) else k): v for k, v in pairs}
        if int(info["pending"]) > 0:
            name = info["name"]
            names.append(name_text(name) if isinstance(name, bytes) else name)
    return names


def pending_elsewhere(client: redis.Redis, stream: str, group: str,
                      consumers: Sequence[str | bytes], limit: int, own_stem: str
                      ) -> tuple[PendingElsewhere, str | None]:
    """The pending entries of the consumers in `group` that are not this run's (`own_stem`:
    ``not_this_runs``), at most `limit` per consumer (their oldest), each with its owner and
    fields (None: deleted from the stream); and the bound: the smallest last ID read of a
    consumer that owns more than `limit` (its entries past it were not read), or None when
    every entry was read. `consumers`: those found with pending entries just before.

    The owners are one snapshot: one MULTI/EXEC of XINFO CONSUMERS and ``XPENDING - +
    limit+1 <consumer>`` per consumer (an entry moved between two consumers meanwhile is
    seen once, with one of them). Where that XINFO CONSUMERS names another consumer with
    pending entries (one that took entries since), the snapshot is taken again with it, up
    to ``SNAPSHOT_TRIES`` times; then the last one is used, with the bound ``UNREAD`` (the
    missed consumers may own an older entry of any key: every entry is held), and a WARNING
    says so. The
    fields are read after (XRANGE per ID, pipelined): an entry's fields never change, and
    one acked meanwhile is done."""
    wanted = list(consumers)
    for attempt in range(SNAPSHOT_TRIES):
        replies = in_transaction(client, [("XINFO", "CONSUMERS", stream, group), *(
            pending_command(stream, group, "-", "+", limit + 1, c) for c in wanted)])
        if any(isinstance(r, Exception) and unit_vanished(r) for r in replies):
            return [], None
        for reply in replies:
            if isinstance(reply, Exception):
                raise reply
        now = [c for c in _with_pending(replies[0]) if not_this_runs(c, own_stem)]
        missed = [c for c in now if c not in wanted]
        if not missed:
            break
        if attempt + 1 == SNAPSHOT_TRIES:
            log.warning("%s / %s: consumers kept taking entries while their pending entries "
                        "were read (%d tries); %d of them not read: every entry of the group "
                        "is held", stream, group, SNAPSHOT_TRIES, len(missed))
            return _with_fields(client, stream, replies[1:], limit)[0], UNREAD
        wanted += missed
    return _with_fields(client, stream, replies[1:], limit)


def _with_fields(client: redis.Redis, stream: str, replies: Sequence[Any], limit: int
                 ) -> tuple[PendingElsewhere, str | None]:
    """The XPENDING `replies` (at most `limit` + 1 rows each) as rows with their fields, and
    the bound (``pending_elsewhere``)."""
    rows: list[tuple[str, str]] = []
    bounds: list[str] = []
    for reply in replies:
        page = [(r[ID].decode(), shown(r[OWNER])) for r in reply]
        if len(page) > limit:
            page = page[:limit]
            bounds.append(page[-1][0])
        rows += page
    try:
        fields = fetch_entries(client, stream, [entry_id for entry_id, _ in rows])
    except redis.ResponseError as exc:
        if unit_vanished(exc):
            return [], None
        raise
    bound = min(bounds, key=stream_id_key) if bounds else None
    return [(entry_id, owner, fields[entry_id]) for entry_id, owner in rows], bound


def unclaim_held(client: redis.Redis, unit: Unit, counts: Sequence[tuple[str, int]]
                 ) -> tuple[int, list[str]]:
    """Set the delivery count of held entries back to what it was before this run's claim
    (``unclaim_held.lua``): `counts` pairs each entry ID with the count the claim left; only
    entries still pending on `unit`'s consumer with that count change. Returns how many did
    (-1 when the stream or group is gone) and the IDs of those found deleted from the stream
    upstream (their PEL slots acked: report them deleted)."""
    script = scripts_for(client)["unclaim_held"]
    changed, deleted = 0, list[str]()
    for start in range(0, len(counts), UNCLAIM_CHUNK):
        args: list[str | int] = [unit.group, unit.consumer]
        args += chain.from_iterable(counts[start : start + UNCLAIM_CHUNK])
        reply = script(keys=[unit.stream], args=args)
        if int(reply[0]) < 0:
            return -1, deleted
        changed += int(reply[0])
        deleted += [i.decode() if isinstance(i, bytes) else i for i in reply[1:]]
    return changed, deleted
