"""The cursors of split units: one string key per (stream, group) that several parts claim
together, each step reading from where it stands and moving it on in the same script call
(``claim_due.lua``), so no two steps read the same PEL rows; and per part a list of the
ranges it took (``ranges_key``: ``recovery.executor.claim.shared`` reads it).

A cursor shares its stream's Redis Cluster hash slot (the dead-letter naming rule,
``recovery.redis_io.dlq_names``): ``{orders}:recovery-split:<run id>:<nonce>:<group>``. The
nonce is new each time a run opens its cursors, so the range lists a part walks again are
only those this run recorded (never a killed run's with the same ID). The driver creates the
cursors before the pass and deletes them and the lists after it; a killed run's expire (every
one of these keys has a TTL: the cursor from its SET, a list from its first RPUSH).
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence

import redis

from recovery.errors import DeadLetterNameError
from recovery.redis_io.dlq_names import dead_letter_key
from recovery.redis_io.error_codes import first_refusal
from recovery.redis_io.round_trips import each

SUFFIX = ":recovery-split:"
TTL_MS = 24 * 3600 * 1000  # a killed run's cursors go away on their own after a day
START = "0-0"  # a cursor before the first step (claim_due.lua: then '(<id>', then 'done')


def new_nonce() -> str:
    """A fresh nonce for one opening of a run's cursors."""
    return secrets.token_hex(4)


def cursor_key(stream: str, group: str, run_id: str, nonce: str) -> str | None:
    """The cursor of `stream` / `group` in run `run_id` (its cursors opened with `nonce`), in
    the stream's hash slot; None where no such name exists (a stream with a ``}`` but no
    hash tag: it stays whole)."""
    try:
        return dead_letter_key(stream, f"{SUFFIX}{run_id}:{nonce}:{group}")
    except DeadLetterNameError:
        return None


def ranges_key(cursor: str, consumer: str) -> str:
    """The list of the ranges one part (its job `consumer`) took through `cursor`
    (``claim_due.lua``): in the same hash slot as the cursor, and so as the stream."""
    return f"{cursor}:{consumer}"


def open_cursors(client: redis.Redis, keys: Sequence[str]) -> str | None:
    """Set each cursor to its start, with a TTL, pipelined. Returns None when they are
    usable, else the server's refusal (an ACL user without the cursors' keys or commands:
    the run then keeps every unit whole). Other errors are raised."""
    return first_refusal(each(client, [("SET", key, START, "PX", TTL_MS) for key in keys]))


def is_split_key(key: str) -> bool:
    """True for a name ``cursor_key`` or ``ranges_key`` makes (any run)."""
    return SUFFIX in key
