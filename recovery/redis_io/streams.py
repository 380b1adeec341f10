"""Redis Streams commands the job uses, one function per command.

Times are milliseconds. IDs are ``str`` (``"<ms>-<seq>"``); field names and values stay
``bytes``, in stream order, duplicates kept. All functions expect a client from
``recovery.redis_io.redis_conn.connect`` (raw replies for stream commands).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import cache
from typing import TypeVar

import redis

from recovery.params import Unit
from recovery.redis_io.round_trips import each

log = logging.getLogger(__name__)

Fields = list[tuple[bytes, bytes]]
FlatFields = list[bytes]  # [name1, value1, name2, value2, ...] as Redis replies
K = TypeVar("K", str, bytes)  # a stream ID as the caller holds it
END_CURSOR = "0-0"


# One XPENDING extended-form row as Redis sends it: [id, consumer, idle ms, delivery count]
# (id and consumer are bytes). Kept raw: a million rows are parsed by hiredis, not by Python.
PendingRow = list
ID, OWNER, IDLE, COUNT = range(4)  # positions in a PendingRow


def as_str(value: bytes | str) -> str:
    """A reply element as ``str`` (UTF-8 bytes decoded)."""
    return value.decode() if isinstance(value, bytes) else value


def pairs(flat: Sequence[bytes]) -> Fields:
    """``[f1, v1, f2, v2]`` -> ``[(f1, v1), (f2, v2)]``."""
    return [(flat[i], flat[i + 1]) for i in range(0, len(flat), 2)]


def server_version(client: redis.Redis) -> tuple[int, int, int]:
    """(major, minor, patch) of the server (INFO server, ``redis_version``)."""
    text = str(client.info("server").get("redis_version", "0.0.0"))
    major, minor, patch, *_ = [*(int(p) for p in text.split(".")[:3] if p.isdigit()), 0, 0, 0]
    return major, minor, patch


def scan_keys(client: redis.Redis, match: str, count: int) -> Iterator[bytes]:
    """Every key matching `match`, whatever its type (SCAN MATCH .. COUNT ..)."""
    yield from client.scan_iter(match=match, count=count)


def key_type(client: redis.Redis, key: str) -> str:
    """TYPE of `key`: ``stream``, ``none``, ``hash`` ..."""
    return as_str(client.type(key))


def shown(name: bytes | str) -> str:
    """A group or consumer name as text for reports and logs: bytes that are not UTF-8 appear
    as ``\\xNN`` escapes (such a name cannot be sent back as text)."""
    return name.decode("utf-8", "backslashreplace") if isinstance(name, bytes) else name


def info_rows(reply: Sequence[Sequence[object]]) -> list[dict[str, object]]:
    """An XINFO GROUPS / XINFO CONSUMERS reply as dicts with str keys. Values are decoded
    where they are UTF-8; a name that is not stays bytes."""
    return [_info_dict(row) for row in reply]


def _info_dict(row: Sequence[object]) -> dict[str, object]:
    return {_info_key(k): (name_text(v) if isinstance(v, bytes) else v)  # type: ignore[arg-type]
            for k, v in zip(row[0::2], row[1::2], strict=True)}


@cache
def _info_key(name: bytes | str) -> str:
    """An XINFO field name as text (a few names, read once per stream or group: decoded
    once per process)."""
    return as_str(name)


def name_text(value: bytes) -> str | bytes:
    """A name from a reply as text where it is UTF-8, else the bytes as they came."""
    try:
        return value.decode()
    except UnicodeDecodeError:
        return value


def live_consumers(client: redis.Redis, stream: str, group: str, within_ms: int,
                   excluded_prefix: str) -> list[str]:
    """The group's consumers seen within `within_ms` ms, fewest pending entries first (then
    by name), leaving out names that start with `excluded_prefix` or are not UTF-8. Seen:
    XINFO CONSUMERS ``inactive`` (since the last successful read; Redis 7.2+, Valkey; -1 for
    never) where the server reports it, else ``idle`` (since the last interaction)."""
    rows = info_rows(client.execute_command("XINFO CONSUMERS", stream, group))
    live = []
    for row in rows:
        name, seen = row["name"], row.get("inactive", row["idle"])
        if isinstance(name, str) and not name.startswith(excluded_prefix) and \
                0 <= int(seen) <= within_ms:  # type: ignore[call-overload]
            live.append((int(row["pending"]), name))  # type: ignore[call-overload]
    return [name for _, name in sorted(live)]


def pending_count(client: redis.Redis, stream: str, group: str) -> int:
    """Number of entries in the group's PEL (XPENDING summary form; the notebook uses it)."""
    return int(client.execute_command("XPENDING", stream, group)[0])


@dataclass(frozen=True)
class IdClaim:
    """One XCLAIM of given IDs (``claim_ids``).

    `rows`: the PEL rows of the IDs' range as found just before the claim (all owners, any
    idle time), ID -> PendingRow; `complete`: whether that read reached the last ID (else
    rows past the last one read are unknown); `ids` / `flats`: the entries claimed, in
    argument order; `nils`: how many claimed entries came back as nil (Redis 6.2: deleted
    upstream, now the claiming consumer's; 7.0+ drops a deleted entry from the PEL and
    replies nothing for it).
    """

    rows: dict[bytes, PendingRow]
    complete: bool
    ids: list[bytes]
    flats: list[FlatFields]
    nils: int


def claim_ids(client: redis.Redis, unit: Unit, min_idle_ms: int, ids: Sequence[str],
              rows_read: int) -> IdClaim:
    """``XCLAIM stream group consumer min_idle_ms id...`` for `unit` (with fields: each
    claimed entry's delivery count goes up by one), in one MULTI with the XPENDING rows of
    the range from the first to the last of `ids` (ascending), at most `rows_read` rows.
    The min-idle guard leaves alone an entry another consumer took (or was given) within
    `min_idle_ms` ms; an ID no longer pending is not claimed (no FORCE)."""
    stream, group, consumer = unit.stream, unit.group, unit.consumer
    pipe = client.pipeline(transaction=True)
    pipe.execute_command(*pending_command(stream, group, ids[0], ids[-1], rows_read))
    pipe.execute_command("XCLAIM", stream, group, consumer, min_idle_ms, *ids)
    rows, items = pipe.execute()
    found = [item for item in items if item is not None]
    complete = len(rows) < rows_read or as_str(rows[-1][ID]) == ids[-1]
    return IdClaim({r[ID]: r for r in rows}, complete, [item[0] for item in found],
                   [item[1] for item in found], len(items) - len(found))


def stream_id_key(entry_id: str) -> tuple[int, int]:
    """Sort key of a stream ID ``"<ms>-<seq>"``: numeric, not lexical."""
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)


MAX_SEQ = 2**64 - 1


def next_id(entry_id: str) -> str:
    """The smallest stream ID after `entry_id` (an inclusive start for the next read)."""
    ms, seq = stream_id_key(entry_id)
    return f"{ms + 1}-0" if seq == MAX_SEQ else f"{ms}-{seq + 1}"


def pending_command(stream: str, group: str, start: str, end: str, count: int,
                    consumer: str | bytes | None = None, min_idle_ms: int | None = None
                    ) -> tuple[object, ...]:
    """The XPENDING extended-form command for up to `count` PEL rows with start <= id <= end,
    only `consumer`'s and only those idle >= `min_idle_ms` ms when given (for pipelines)."""
    idle = ("IDLE", min_idle_ms) if min_idle_ms is not None else ()
    owner = (consumer,) if consumer is not None else ()
    return ("XPENDING", stream, group, *idle, start, end, count, *owner)


def pending_page(client: redis.Redis, stream: str, group: str, start: str, end: str,
                 count: int, consumer: str | None = None,
                 min_idle_ms: int | None = None) -> list[PendingRow]:
    """XPENDING extended form: up to `count` PEL rows with start <= id <= end (raw rows)."""
    return client.execute_command(  # type: ignore[no-any-return]
        *pending_command(stream, group, start, end, count, consumer, min_idle_ms))


def pending_pages(client: redis.Redis, stream: str, group: str, page: int,
                  consumer: str | None = None, min_idle_ms: int | None = None,
                  start: str = "-", end: str = "+") -> Iterator[list[PendingRow]]:
    """The whole PEL (or `consumer`'s part, or entries idle >= `min_idle_ms`; or only IDs from
    `start` to `end`, ``(`` for exclusive) in ID order, `page` raw rows per XPENDING call."""
    while True:
        rows = pending_page(client, stream, group, start, end, page, consumer, min_idle_ms)
        if rows:
            yield rows
        if len(rows) < page:
            return
        start = "(" + as_str(rows[-1][ID])


def range_pages(client: redis.Redis, stream: str, page: int) -> Iterator[list[list[object]]]:
    """Every entry of `stream` in ID order, `page` entries per XRANGE reply (``COUNT``; the
    next page starts after the last ID seen: ``(<id>``, Redis 6.2+), never the whole stream
    in one reply. Each page is XRANGE's raw reply: ``[[id, [name, value, ...]], ...]`` (bytes).
    A missing key gives no page; a key of another type raises ResponseError WRONGTYPE."""
    start = "-"
    while True:
        entries = client.execute_command("XRANGE", stream, start, "+", "COUNT", page)
        if entries:
            yield entries
        if len(entries) < page:
            return
        start = "(" + as_str(entries[-1][0])


def fetch_entries(client: redis.Redis, stream: str, ids: Sequence[str]
                  ) -> dict[str, Fields | None]:
    """Fields of each ID as (name, value) pairs (:func:`fetch_flats`); None for IDs gone."""
    return {i: None if flat is None else pairs(flat)
            for i, flat in fetch_flats(client, stream, ids).items()}


def fetch_flats(client: redis.Redis, stream: str, ids: Sequence[K]
                ) -> dict[K, FlatFields | None]:
    """Flat fields of each ID (str or bytes; XRANGE id id, pipelined with :func:`each`);
    None for IDs gone from the stream. Raises the first error the server answered."""
    result: dict[K, FlatFields | None] = {}
    for entry_id, reply in zip(ids, each(client, [("XRANGE", stream, i, i) for i in ids]),
                               strict=True):
        if isinstance(reply, Exception):
            raise reply
        result[entry_id] = reply[0][1] if reply else None  # type: ignore[index]
    return result


def drop_keys(client: redis.Redis, keys: Sequence[str], what: str, ttl_s: int) -> None:
    """Delete the run's `keys` (journals, cursors: `what` they are); what cannot be deleted
    expires within `ttl_s` seconds (logged, not raised: this runs also after a failed run,
    whose own error must come out)."""
    try:
        replies = each(client, [("DEL", key) for key in keys])
    except redis.RedisError as exc:
        replies = [exc]
    failed = [r for r in replies if isinstance(r, Exception)]
    if failed:
        log.warning("%d %s not deleted (they expire within %d s): %s", len(failed), what,
                    ttl_s, failed[0])
