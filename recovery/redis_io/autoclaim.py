"""One XAUTOCLAIM claim step with its atomic XPENDING reads: the commands, and the
:class:`ClaimBatch` of their replies (``recovery.executor.claim.loop`` runs the loop).

Times are milliseconds; IDs of claimed entries stay ``bytes`` as Redis sends them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import redis

from recovery.params import Unit
from recovery.redis_io.round_trips import in_transaction
from recovery.redis_io.streams import (
    END_CURSOR,
    ID,
    IDLE,
    OWNER,
    FlatFields,
    PendingRow,
    as_str,
    pending_command,
    stream_id_key,
)


@dataclass(frozen=True)
class ClaimBatch:
    """One XAUTOCLAIM step.

    `ids` / `flats`: the claimed entries (ID as bytes, flat fields); `deleted`: IDs (bytes)
    found in the PEL but gone from the stream (7.0+: the third reply element; 6.2: entries
    returned as nil, see ``deleted_by_position``); `before`: ID -> the PendingRow of the same
    range read atomically just before the claim (last owner, idle time, count); `own_first`:
    the ID of the claiming consumer's first own entry at or after the cursor just before the
    claim, if any; `unresolved`: how many nil entries (6.2) could not be matched to an ID
    (they are now the claiming consumer's: a read of its own range finds them).

    A first step that read the whole PEL before its claim (:func:`first_claims` with
    `whole`): `own_known` False when that read may have stopped short of an own entry the
    claim's range holds (the claim loop then reads the range); `left`, the rows the claim
    left to other consumers, when the read saw every row and the claim reached the PEL's end
    (None: unknown, read after the loop).

    Under a backoff schedule (``recovery.redis_io.claim_due.claim_due_batch``): `not_due`, the
    rows read that were left alone, not due yet; `due_in_ms`, ms until the first of them is
    (None: none). A step of a claim several tasks share (``claim_due_batch`` with a shared
    cursor): `taken`, the range it took (``claim_due.taken_range``), None when the cursor was
    done (nothing read).
    """

    next_cursor: str
    ids: list[bytes]
    flats: list[FlatFields]
    deleted: list[bytes]
    before: dict[bytes, PendingRow]
    own_first: bytes | None
    unresolved: int = 0
    not_due: int = 0
    due_in_ms: int | None = None
    own_known: bool = True
    left: list[PendingRow] | None = None
    taken: str | None = None


def claim_batch(client: redis.Redis, unit: Unit, min_idle_ms: int, cursor: str, count: int
                ) -> ClaimBatch:
    """One XAUTOCLAIM step of `unit`'s stream and group from `cursor` (up to `count`
    entries idle at least `min_idle_ms` ms, for its consumer), with atomic XPENDING reads just
    before it: the idle entries of the same range, and the consumer's own first entry from
    `cursor` on.

    MULTI/EXEC makes the three see the same PEL, so the last owner, idle time and count of
    each claimed entry are known. (XAUTOCLAIM's COUNT counts entries deleted upstream just as
    the XPENDING page does, and skips entries not idle enough without counting them: seen on
    Redis 6.2, 7.0 and Valkey 8.1.)
    """
    replies = in_transaction(client, claim_commands(unit, min_idle_ms, cursor, count))
    error = next((r for r in replies if isinstance(r, Exception)), None)
    if error is not None:
        raise error
    return claim_reply(*replies)


def first_claims(client: redis.Redis, units: Sequence[Unit], min_idle_ms: int, count: int,
                 whole: bool = False
                 ) -> list[ClaimBatch | Exception]:
    """The first step (from ``0-0``) of :func:`claim_batch` for each of `units`, all in one
    MULTI (one round trip, each unit's claim atomic with its
    reads as in :func:`claim_batch`): a ClaimBatch per unit, or the error its stream or
    group answered (NOGROUP, WRONGTYPE: the other units are claimed all the same). On a
    Redis Cluster (a MULTI must stay in one slot) give one unit at a time.

    With `whole` (for units expected to hold fewer than `count` entries), each claim's read
    is one XPENDING of the first `count` rows of its PEL, whoever owns them and however idle
    (:func:`whole_reply`), instead of the idle rows and the consumer's first own entry: two
    commands per unit instead of three, and a small PEL is seen whole."""
    claims = FirstClaims(units, min_idle_ms, count, whole)
    return claims.batches(in_transaction(client, claims.commands()))


class FirstClaims(NamedTuple):
    """The first steps of :func:`first_claims` for `units`, as commands and replies: for a
    round sent ahead of reading it (``send_transaction(client, claims.commands())``, then
    ``claims.batches(sent.replies())``)."""

    units: Sequence[Unit]
    min_idle_ms: int
    claim_count: int  # claim.count: entries per step at most
    whole: bool

    def commands(self) -> list[tuple[object, ...]]:
        """The MULTI's commands, unit by unit."""
        make = whole_commands if self.whole else claim_commands
        return [c for unit in self.units
                for c in make(unit, self.min_idle_ms, END_CURSOR, self.claim_count)]

    def batches(self, replies: Sequence[Any]) -> list[ClaimBatch | Exception]:
        """A ClaimBatch, or the error its stream or group answered, per unit, from the
        MULTI's replies."""
        per_unit = WHOLE_REPLIES if self.whole else CLAIM_REPLIES
        result: list[ClaimBatch | Exception] = []
        for unit, i in zip(self.units, range(0, len(replies), per_unit), strict=True):
            step = replies[i : i + per_unit]
            error = next((r for r in step if isinstance(r, Exception)), None)
            if error is not None:
                result.append(error)
            elif self.whole:
                result.append(whole_reply(step[0], step[1], unit.consumer.encode(),
                                          self.min_idle_ms, self.claim_count))
            else:
                result.append(claim_reply(*step))
        return result


CLAIM_REPLIES = 3  # commands :func:`claim_commands` gives


def claim_commands(unit: Unit, min_idle_ms: int, cursor: str, count: int
                   ) -> list[tuple[object, ...]]:
    """One claim step's commands: XPENDING IDLE of up to `count` rows from `cursor`,
    XPENDING of the unit's consumer's first entry from `cursor`, XAUTOCLAIM."""
    stream, group, consumer = unit.stream, unit.group, unit.consumer
    return [pending_command(stream, group, cursor, "+", count, min_idle_ms=min_idle_ms),
            pending_command(stream, group, cursor, "+", 1, consumer),
            ("XAUTOCLAIM", stream, group, consumer, min_idle_ms, cursor, "COUNT", count)]


def claim_reply(before_rows: list[PendingRow], own_rows: list[PendingRow],
                reply: Sequence[Any]) -> ClaimBatch:
    """A ClaimBatch of one step's three raw replies (:func:`claim_commands`' commands)."""
    claim = _Claimed.of(reply, before_rows)
    return ClaimBatch(claim.next_cursor, claim.ids, claim.flats, claim.deleted,
                      {r[ID]: r for r in before_rows}, own_rows[0][ID] if own_rows else None,
                      claim.unresolved)


class _Claimed(NamedTuple):
    """An XAUTOCLAIM reply read: the next cursor, the claimed entries' IDs and flat fields,
    the IDs of entries deleted upstream, and how many 6.2 nil entries stayed unmatched."""

    next_cursor: str
    ids: list[bytes]
    flats: list[FlatFields]
    deleted: list[bytes]
    unresolved: int

    @classmethod
    def of(cls, reply: Sequence[Any], before_rows: Sequence[PendingRow]) -> _Claimed:
        """The raw XAUTOCLAIM `reply`; `before_rows`, the ``XPENDING ... IDLE`` rows read
        just before it, match a 6.2 reply's nil entries to their IDs
        (:func:`deleted_by_position`)."""
        next_cursor, items = as_str(reply[0]), reply[1]
        found = [item for item in items if item is not None]
        ids = [item[0] for item in found]
        deleted = list(reply[2]) if len(reply) > 2 else []
        unresolved = 0
        if None in items:  # Redis 6.2: a deleted entry comes back as nil
            nil_ids = deleted_by_position(items, before_rows, next_cursor)
            if nil_ids is None:
                unresolved = len(items) - len(ids)
            else:
                deleted += nil_ids
        return cls(next_cursor, ids, [item[1] for item in found], deleted, unresolved)


WHOLE_REPLIES = 2  # commands :func:`whole_commands` gives


def whole_commands(unit: Unit, min_idle_ms: int, cursor: str, count: int
                   ) -> list[tuple[object, ...]]:
    """A first claim step's commands with the whole PEL read: XPENDING of up to `count` rows
    from `cursor` (any owner, any idle time), XAUTOCLAIM."""
    return [pending_command(unit.stream, unit.group, cursor, "+", count),
            ("XAUTOCLAIM", unit.stream, unit.group, unit.consumer, min_idle_ms, cursor,
             "COUNT", count)]


def whole_reply(rows: list[PendingRow], reply: Sequence[Any], consumer: bytes,
                min_idle_ms: int, count: int) -> ClaimBatch:
    """A ClaimBatch of :func:`whole_commands`' two raw replies, from ``0-0``.

    The rows idle at least `min_idle_ms` ms are what ``XPENDING ... IDLE`` would have read
    (``before``); the first row `consumer` owns is its first own entry. Fewer than `count`
    rows: the read saw the whole PEL, so what the claim left (rows of other consumers it did
    not take) is known (``left``) once the claim reached the end. `count` rows, all idle:
    the claim took exactly those (XAUTOCLAIM's COUNT), so no own entry lies in its range
    unread. `count` rows, some not idle: the claim may have gone past the read, so its
    range is read again (``own_known`` False)."""
    idle = [r for r in rows if r[IDLE] >= min_idle_ms]
    own = next((r for r in rows if r[OWNER] == consumer), None)
    claim = _Claimed.of(reply, idle)
    whole_pel = len(rows) < count
    left = None
    if whole_pel and claim.next_cursor == END_CURSOR:
        taken = {*claim.ids, *claim.deleted}
        left = [r for r in rows if r[OWNER] != consumer and r[ID] not in taken]
    return ClaimBatch(claim.next_cursor, claim.ids, claim.flats, claim.deleted,
                      {r[ID]: r for r in idle}, own[ID] if own is not None else None,
                      claim.unresolved, own_known=whole_pel or len(idle) == len(rows),
                      left=left)


def deleted_by_position(items: Sequence[object], before_rows: Sequence[PendingRow],
                        next_cursor: str) -> list[bytes] | None:
    """The IDs of the nil items of a Redis 6.2 XAUTOCLAIM reply (entries deleted upstream,
    claimed all the same and left in the PEL), or None when they cannot be told for sure.

    6.2 claims the first COUNT idle PEL entries from the cursor, in ID order, and replies one
    item per claimed entry in that order, nil for an entry gone from the stream. The
    ``XPENDING ... IDLE`` read just before lists the same entries in the same order, unless
    an entry became idle enough between the two commands (MULTI does not stop the clock on
    6.2) and was claimed as well. Such a shift shows: an item's ID differs from the row at
    its position, there are more items than rows, or the last row matched lies at or past the
    next cursor (so it was not examined). Then None.
    """
    if len(items) > len(before_rows):
        return None
    nil_ids: list[bytes] = []
    for item, row in zip(items, before_rows, strict=False):
        if item is None:
            nil_ids.append(row[ID])
        elif item[0] != row[ID]:  # type: ignore[index]
            return None
    last = as_str(before_rows[len(items) - 1][ID]) if items else None
    if last is not None and next_cursor != END_CURSOR and \
            stream_id_key(last) >= stream_id_key(next_cursor):
        return None
    return nil_ids
