"""Keys held across runs behind a dead-lettered head (``order.dead_letter_releases = false``).

When the ordered hand-over dead-letters the head of a key (at the delivery limit, or by
``Result.dead_letter``), ``dead_letter.lua`` records it in the same atomic call as the move:
one hash per stream and group (:func:`hold_key`, in the stream's hash slot), field the key's
value, value ``<head ID> <dead-letter ID>``. Every later hand-over of that key, in this run,
a retried task or any later run, reads the hash first (:func:`read_heads`) and holds the
key's entries after the head, pending. Nothing but an operator deletes a field: ``HDEL
<hash> <key>`` releases that key (``DEL <hash>`` all of the group's), and the next run hands
its entries over in ID order (docs/OPERATIONS.md, "Keys held behind a dead letter").

A run reads the hashes of its configured ``order.hold_prefix`` only. So that no hold is left
unread, each prefix a run held keys under is recorded in the set :data:`HOLD_PREFIXES`
(a fixed name, whatever the prefix), and before anything is claimed the driver looks for
holds under every recorded prefix and under the names earlier versions gave the hashes
(:func:`earlier_hold_key`), and refuses the run where it finds some
(``recovery.driver.ordered.refuse_holds_elsewhere``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import redis
from redis.crc import key_slot

from recovery.errors import DeadLetterNameError, HeldElsewhereError
from recovery.redis_io.dlq_names import hash_tag
from recovery.redis_io.error_codes import TargetRefused, error_code, unit_vanished
from recovery.redis_io.round_trips import each
from recovery.redis_io.streams import shown

HoldT = tuple[str, str]  # (the held key's head ID, the head's dead-letter ID)
HOLD_REFUSED = "hold:"  # the move script's refusal kind of a hash of held keys: hold:<type>
DEFAULT_HOLD_PREFIX = "recovery:held:"
# The set of every order.hold_prefix a run held keys under (members: the prefixes). Its
# name has no brace, so no hash of held keys (always a {tag}) is ever named so.
HOLD_PREFIXES = "recovery:held:prefixes"
HMGET_CHUNK = 1000  # fields per HMGET
HOLD_VALUE = re.compile(rb"\d+-\d+ \d+-\d+\Z")  # a value the job writes, as dead_letter.lua checks


def _escaped(text: str) -> str:
    """`text` with ``%``, ``/`` and ``:`` written ``%25``, ``%2F``, ``%3A``: no ``:`` and no
    separator ``/`` is left in it."""
    return text.replace("%", "%25").replace("/", "%2F").replace(":", "%3A")


def hold_key(prefix: str, stream: str, group: str) -> str:
    """The hash of `stream`'s keys held in `group`, in `stream`'s hash slot:
    ``<prefix>{<stream>}/<group>`` for a stream without any ``}``
    (``recovery:held:{orders}/billing``), ``<prefix>{<tag>}/<stream>/<group>`` for a stream
    with a non-empty hash tag (``recovery:held:{eu}/orders{eu}/billing``); after the tag,
    ``%``, ``/`` and ``:`` of the stream and the group are written ``%25``, ``%2F``,
    ``%3A``. No two (prefix, stream, group) share a name (the tag ends at the first ``}``,
    the ``/`` after it say which form, the escapes keep the rest apart), and no name is one
    that :func:`earlier_hold_key` gives (those have a ``:`` after the tag). Raises
    DeadLetterNameError for any other stream name (a ``}`` but no usable tag), as the
    dead-letter naming rule does."""
    tag = hash_tag(stream)
    if tag is not None:
        name = f"{prefix}{{{tag}}}/{_escaped(stream)}/{_escaped(group)}"
    elif "}" not in stream:
        name = f"{prefix}{{{stream}}}/{_escaped(group)}"
    else:
        raise _no_name(stream)
    return _in_slot(name, stream)


def earlier_hold_key(prefix: str, stream: str, group: str) -> str:
    """The name earlier versions of the job gave the hash of `stream`'s keys held in
    `group`: ``<prefix>{<stream>}:<group>`` (a stream without any ``}``),
    ``<prefix><stream>:<group>`` (a stream with a hash tag). Ambiguous: stream ``a`` and
    stream ``{a}``, or a ``:`` in a tagged stream or a group, give two units one name; read
    only to find holds left there (``refuse_holds_elsewhere``), never written."""
    if hash_tag(stream) is not None:
        return _in_slot(f"{prefix}{stream}:{group}", stream)
    if "}" not in stream:
        return _in_slot(f"{prefix}{{{stream}}}:{group}", stream)
    raise _no_name(stream)


def _no_name(stream: str) -> DeadLetterNameError:
    return DeadLetterNameError(
        f"stream {stream!r} has a '}}' but no hash tag, so no name of its held keys can "
        "share its hash slot: rename the stream or give it a {tag}, or leave "
        "order.dead_letter_releases true")


def _in_slot(name: str, stream: str) -> str:
    """`name`, checked to share `stream`'s hash slot (DeadLetterNameError if not)."""
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
    HMGETs of at most ``HMGET_CHUNK`` fields, pipelined. A hash of another type counts as
    no hold here (the dead-letter move refuses to write into it, so that key's head stays
    pending and holds it)."""
    chunks = [(n, name, keys[start : start + HMGET_CHUNK])
              for n, (name, keys) in enumerate(wanted)
              for start in range(0, len(keys), HMGET_CHUNK)]
    replies = each(client, [("HMGET", name, *keys) for _, name, keys in chunks])
    found: list[list[HoldT | None]] = [[] for _ in wanted]
    for (n, _, keys), reply in zip(chunks, replies, strict=True):
        if isinstance(reply, Exception):
            if not unit_vanished(reply):
                raise reply
            found[n] += [None] * len(keys)
        else:
            found[n] += [parse_hold(v) for v in reply]  # type: ignore[attr-defined]
    return found


def hold_counts(client: redis.Redis, names: Sequence[str]) -> list[int | None]:
    """The HLEN of each hash of held keys in `names`, pipelined with one HRANDFIELD ... 1
    WITHVALUES each (reply: [field, value], empty when missing): how many keys it holds (0
    when missing), None for a key of another type or a hash whose value read at random is
    no ``<head ID> <dead-letter ID>`` (not the job's hash: ``dead_letter.lua``'s rule)."""
    commands = [c for name in names
                for c in (count_command(name), ("HRANDFIELD", name, 1, "WITHVALUES"))]
    replies = each(client, commands)
    counts: list[int | None] = []
    for count, sample in zip(replies[0::2], replies[1::2], strict=True):
        for reply in (count, sample):
            if isinstance(reply, Exception) and not unit_vanished(reply):
                raise reply
        counts.append(count if isinstance(count, int) and _ours(sample) else None)
    return counts


def _ours(sample: object) -> bool:
    """Whether an HRANDFIELD ... 1 WITHVALUES reply (``[field, value]``, RESP3
    ``[[field, value]]``; empty for a missing key) has a value the job writes."""
    if not isinstance(sample, list):
        return False
    pair = sample[0] if sample and isinstance(sample[0], list) else sample
    return not pair or (isinstance(pair[-1], bytes) and HOLD_VALUE.match(pair[-1]) is not None)


def recorded_prefixes(client: redis.Redis) -> set[str]:
    """The prefixes runs held keys under (SMEMBERS of :data:`HOLD_PREFIXES`; reply: a set of
    bytes, empty when missing). Raises HeldElsewhereError (exit 2) when that key is of
    another type (a TYPE then names it) or has a member that is not UTF-8 (never one a run
    writes: holds may sit under a prefix no run can name)."""
    [reply] = each(client, [("SMEMBERS", HOLD_PREFIXES)])
    if isinstance(reply, Exception):
        if error_code(reply) != "WRONGTYPE":
            raise reply
        [kind] = each(client, [("TYPE", HOLD_PREFIXES)])  # reply: the type name (bytes)
        kind = shown(kind) if isinstance(kind, bytes | str) else str(kind)
        raise HeldElsewhereError(
            f"{HOLD_PREFIXES!r} is a {kind}, not the set of prefixes runs held keys "
            "under that every run with order.dead_letter_releases false reads: rename that "
            "key (the job's name for it is fixed)")
    prefixes = set()
    for member in reply:  # type: ignore[attr-defined]
        try:
            prefixes.add(member.decode() if isinstance(member, bytes) else str(member))
        except UnicodeDecodeError:
            raise HeldElsewhereError(
                f"{HOLD_PREFIXES!r} has the member {member!r}, not UTF-8, so not a "
                "prefix any run wrote: drop it (SREM) once no hold is left under it"
            ) from None
    return prefixes


def record_prefix(client: redis.Redis, prefix: str) -> None:
    """Add `prefix` to :data:`HOLD_PREFIXES` (SADD; reply: 1 added, 0 already there), before
    a run writes its first hold under it."""
    [reply] = each(client, [("SADD", HOLD_PREFIXES, prefix)])
    if isinstance(reply, Exception):
        raise reply
