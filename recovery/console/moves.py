"""One letter back to its source, or deleted, under the rules of ``jobs/redrive.py``.

A redrive goes through the redrive's own script (``recovery/redis_io/lua/redrive.lua``, by
:func:`recovery.redis_io.redrive.redrive_step`) over the one-ID range of the letter: in one
atomic call it strips the metadata block, counts ``x-redrive-count`` up, XADDs the original
fields to the source and XDELs the letter. Two operators who send the same letter back at the same
moment each run that script; the second finds nothing in the range and moves nothing, so a
letter is moved once. The source must be one the config selects for that dead-letter stream,
and on a Redis Cluster share its hash slot, as for the redrive job.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import StrEnum

import redis
from redis.backoff import NoBackoff
from redis.cluster import RedisCluster
from redis.retry import Retry

from recovery.console.letters import Letter
from recovery.redis_io.letters import delete_letters, letters_by_id
from recovery.redis_io.redrive import RedriveFilter, redrive_step


class Moved(StrEnum):
    """What became of one letter a redrive was asked to move."""

    MOVED = "moved"  # back in its source
    GONE = "gone"  # no longer in the dead-letter stream (moved or deleted meanwhile)
    REFUSED = "refused"  # left where it is: no source, a source not selected, another slot
    UNKNOWN = "unknown"  # the connection failed during its move: back in its source, or not


def refusal(client: redis.Redis, key: str, letter: Letter, sources: Sequence[str]
            ) -> str | None:
    """Why `letter` of dead-letter stream `key` may not go back (None: it may)."""
    source = letter.source
    if source is None:
        return f"{letter.entry_id}: no x-original-stream, so no source to send it back to"
    if source == key:
        return (f"{letter.entry_id}: its source is {key!r} itself: a dead-letter stream is no "
                "letter's source")
    if source not in sources:
        return (f"{letter.entry_id}: its source {source!r} is not a stream the config selects "
                f"for {key}: add it to streams.keys / streams.match")
    if isinstance(client, RedisCluster) and client.keyslot(source) != client.keyslot(key):
        return f"{letter.entry_id}: {source!r} is in another hash slot than {key!r}"
    return None


def redrive_letter(client: redis.Redis, key: str, letter: Letter, sources: Sequence[str]
                   ) -> tuple[Moved, str]:
    """Send `letter` (as read from `key`) back to its source: (outcome, the new source ID or
    the refusal's reason; "" when gone)."""
    refused = refusal(client, key, letter, sources)
    if refused is not None:
        return Moved.REFUSED, refused
    assert letter.source is not None
    try:  # `client` sends it once (see no_retries): a retry would find it gone after a move
        step = redrive_step(client, RedriveFilter(letter.source, key), letter.entry_id,
                            letter.entry_id, 1, 1, dry_run=False)
    except (redis.ConnectionError, redis.TimeoutError) as exc:
        return Moved.UNKNOWN, (f"{letter.entry_id}: the connection failed during its move "
                               f"({type(exc).__name__}): look for it in {key} and in "
                               f"{letter.source}")
    if not step.moved:
        return Moved.GONE, ""
    return Moved.MOVED, step.moved[0][1] or ""


def no_retries(client: redis.Redis) -> redis.Redis:
    """`client` set to send each command once: a move whose reply was lost must say so, not
    run again (the second run finds the letter gone and would report it "already gone")."""
    client.set_retry(Retry(NoBackoff(), 0))
    return client


def redrive_by_id(client: redis.Redis, key: str, entry_id: str, sources: Sequence[str]
                  ) -> tuple[Moved, str]:
    """:func:`redrive_letter` of the letter `entry_id` of `key`, read first (GONE: absent)."""
    flat = letters_by_id(client, key, [entry_id]).get(entry_id)
    if flat is None:
        return Moved.GONE, ""
    return redrive_letter(client, key, Letter.of(entry_id, flat), sources)


def delete_selected(client: redis.Redis, key: str, ids: Sequence[str], sources: Sequence[str]
                    ) -> tuple[int, list[str]]:
    """XDEL those of `ids` still in the dead-letter stream `key` that are letters of one of
    `sources` (the rule of :func:`refusal`, as retention's: an entry without the metadata
    block, or a letter of a source not selected in a shared stream, is not the console's to
    delete). Returns (how many were deleted, the refusals). A stream ID is never reused, so
    what was read is what goes."""
    found = letters_by_id(client, key, ids)
    refused = {i: refusal(client, key, Letter.of(i, flat), sources) for i, flat in found.items()}
    deletable = [i for i, why in refused.items() if why is None]
    return delete_letters(client, key, deletable), [w for w in refused.values() if w]
