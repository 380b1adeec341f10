"""A run ID is used once: the registration a run makes in Redis at start, and the traces a
run leaves there (its split cursors and range lists) that tell a used ID.

The registration is one string key, ``<claim.consumer_prefix>:run:<run id>``, set with SET NX
and a TTL before the run's first write: of two drivers started at once with one ID, one
gets it and the other is refused. On a Redis Cluster it is one key in its own slot, on
whichever node owns that slot: the run touches many nodes, and one is enough to decide.
The run deletes it when it finishes (its report is then the trace); a killed or failed run's
stays until its TTL.
"""

from __future__ import annotations

import secrets
import time

import redis
from redis.exceptions import NoPermissionError, ResponseError

from recovery.errors import ConfigError
from recovery.redis_io.split_cursors import SUFFIX
from recovery.redis_io.streams import scan_keys

REGISTRATION = ":run:"
TTL_S = 7 * 24 * 3600  # as long as a killed run's claim journal can be there
SCAN_COUNT = 10_000  # keys per SCAN call: one pass over the keyspace, given run IDs only
GLOB_SPECIAL = "*?[]\\"


class RunIdTakenError(ConfigError):
    """A given run ID that a run already used (exit 2)."""


def registration_key(consumer_prefix: str, run_id: str) -> str:
    """The key a run registers its ID under: ``<consumer prefix>:run:<run id>``."""
    return f"{consumer_prefix}{REGISTRATION}{run_id}"


def is_registration(key: str, consumer_prefix: str) -> bool:
    """True for a name ``registration_key`` makes (any run ID)."""
    return key.startswith(f"{consumer_prefix}{REGISTRATION}")


def refused(exc: ResponseError) -> bool:
    """True for an ACL refusal (NOPERM) of a command or key."""
    return isinstance(exc, NoPermissionError) or str(exc).startswith("NOPERM")


def register_run(client: redis.Redis, key: str, run_id: str) -> bool | str:
    """SET `key` NX with a TTL of TTL_S seconds (value: the run ID, the start time in ms and
    a random token). True when this run got it, False when it was there (another run used
    the ID), or the server's refusal as text (an ACL user without the key: nothing was
    written). A SET re-sent after a lost reply finds its own value: True."""
    value = f"{run_id} {int(time.time() * 1000)} {secrets.token_hex(4)}".encode()
    try:
        if client.set(key, value, nx=True, ex=TTL_S):
            return True
    except ResponseError as exc:
        if refused(exc):
            return str(exc)
        raise
    try:
        return bool(client.get(key) == value)
    except ResponseError as exc:
        if refused(exc):
            return False  # there, and not to be read: not this run's
        raise


def split_key_pattern(run_id: str) -> str:
    """A SCAN MATCH pattern for every split cursor and range list of run `run_id` (any
    stream, group, part; ``recovery.redis_io.split_cursors``)."""
    escaped = "".join(f"\\{c}" if c in GLOB_SPECIAL else c for c in run_id)
    return f"*{SUFFIX}{escaped}:*"


def split_traces(client: redis.Redis, run_id: str) -> list[str]:
    """Up to one split cursor or range list of run `run_id` still in Redis (a killed run's, or
    a running one's): a SCAN of the keyspace, stopped at the first hit."""
    for key in scan_keys(client, split_key_pattern(run_id), SCAN_COUNT):
        return [key.decode("utf-8", "backslashreplace") if isinstance(key, bytes) else key]
    return []
