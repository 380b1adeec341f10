"""Keys held across runs behind a dead-lettered head (``order.dead_letter_releases = false``).

When the ordered hand-over dead-letters the head of a key (at the delivery limit, or by
``Result.dead_letter``), ``dead_letter.lua`` records it in the same atomic call as the move:
one hash per stream and group, ``<order.hold_prefix><stream>:<group>`` (a stream without a
hash tag wrapped in one, ``recovery:held:{orders}:billing``, so the hash shares the stream's
slot), field the key's value, value ``<head ID> <dead-letter ID>``. Every later hand-over of
that key, in this run, a retried task or any later run, reads the hash first
(:func:`read_heads`) and holds the key's entries after the head, pending. Nothing but an
operator deletes a field: ``HDEL <hash> <key>`` releases that key (``DEL <hash>`` all of
the group's), and the next run hands its entries over in ID order (docs/OPERATIONS.md,
"Keys held behind a dead letter").
"""

from __future__ import annotations

from collections.abc import Sequence

import redis
from redis.crc import key_slot

from recovery.errors import DeadLetterNameError
from recovery.redis_io.dlq_names import hash_tag
from recovery.redis_io.error_codes import TargetRefused, unit_vanished
from recovery.redis_io.round_trips import each

HoldT = tuple[str, str]  # (the held key's head ID, the head's dead-letter ID)
HOLD_REFUSED = "hold:"  # the move script's refusal kind of a hash of held keys: hold:<type>


def hold_key(prefix: str, stream: str, group: str) -> str:
    """The hash of `stream`'s keys held in `group`, in `stream`'s hash slot: a stream with a
    non-empty hash tag keeps it (``recovery:held:orders{eu}:g``), one without any ``}`` is
    wrapped in one (``recovery:held:{orders}:g``). Raises DeadLetterNameError for any other
    stream name (a ``}`` but no usable tag), as the dead-letter naming rule does."""
    if hash_tag(stream) is not None:
        name = f"{prefix}{stream}:{group}"
    elif "}" not in stream:
        name = f"{prefix}{{{stream}}}:{group}"
    else:
        raise DeadLetterNameError(
            f"stream {stream!r} has a '}}' but no hash tag, so no name of its held keys can "
            "share its hash slot: rename the stream or give it a {tag}, or leave "
            "order.dead_letter_releases true")
    if key_slot(name.encode()) != key_slot(stream.encode()):
        raise DeadLetterNameError(f"held-keys name {name!r} would not share the hash slot of "
                                  f"{stream!r}: choose another order.hold_prefix")
    return name


def count_command(name: str) -> tuple[object, ...]:
    """HLEN of the hash of held keys `name`; reply: how many keys it holds (int, 0 when
    missing; WRONGTYPE for a key of another type)."""
    return ("HLEN", name)


def hold_refused(name: str, refused: TargetRefused) -> str:
    """The report reason of a head not dead-lettered because its unit's hash of held keys
    `name` is a key of another type (``NOTLETTERS hold:<type> ...``): nothing of the unit was
    written; the fix."""
    kind = refused.kind.removeprefix(HOLD_REFUSED)
    return (f"{name!r} is a {kind} ({refused.why}), not the job's hash of held keys; nothing "
            "was written and the entry stays pending: delete or rename that key, or set "
            "order.hold_prefix")


def parse_hold(value: object) -> HoldT | None:
    """A hash value (``<head ID> <dead-letter ID>``, bytes) as (head ID, dead-letter ID);
    None for a missing field or one this job did not write (then the key is not held)."""
    if not isinstance(value, bytes):
        return None
    head, _, letter = value.decode("ascii", "replace").partition(" ")
    ms, dash, seq = head.partition("-")
    if not (dash and ms.isdigit() and seq.isdigit()):
        return None
    return head, letter


def read_heads(client: redis.Redis, wanted: Sequence[tuple[str, Sequence[bytes]]]
               ) -> list[list[HoldT | None]]:
    """For each (hash, keys) of `wanted`, per key its hold (:func:`parse_hold`) or None:
    one HMGET per hash, pipelined. A hash of another type counts as no hold here (the
    dead-letter move refuses to write into it, so that key's head stays pending and holds
    it)."""
    replies = each(client, [("HMGET", name, *keys) for name, keys in wanted])
    found: list[list[HoldT | None]] = []
    for (_, keys), reply in zip(wanted, replies, strict=True):
        if isinstance(reply, Exception):
            if unit_vanished(reply):
                found.append([None] * len(keys))
                continue
            raise reply
        found.append([parse_hold(v) for v in reply])  # type: ignore[attr-defined]
    return found


def read_all_heads(client: redis.Redis, name: str) -> dict[bytes, HoldT]:
    """Every hold in hash `name` (HGETALL): key -> (head ID, dead-letter ID); {} when there is
    none or the key is of another type."""
    reply = each(client, [("HGETALL", name)])[0]
    if isinstance(reply, Exception):
        if unit_vanished(reply):
            return {}
        raise reply
    if isinstance(reply, dict):
        pairs = list(reply.items())
    else:  # flat [field, value, ...]
        flat = list(reply)  # type: ignore[call-overload]
        pairs = list(zip(flat[0::2], flat[1::2], strict=True))
    holds = {k: parse_hold(v) for k, v in pairs}
    return {k: h for k, h in holds.items() if h is not None}

