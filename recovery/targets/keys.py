"""Which keys a job works on, shared by the recovery run, the redrive and the dead-letter
job: the server check, the streams the ``[streams]`` selection names or matches (dead-letter
streams left out), and why a key is left alone (:class:`Skipped`)."""

from __future__ import annotations

import logging
from dataclasses import dataclass

import redis

from recovery.errors import UnsupportedServerError
from recovery.params import RedisParams
from recovery.redis_io.redis_conn import key_refused, redis_errors
from recovery.redis_io.run_ids import is_registration
from recovery.redis_io.split_cursors import is_split_key
from recovery.redis_io.streams import scan_keys, server_version, shown
from recovery.settings.model import Settings

log = logging.getLogger(__name__)

MIN_VERSION = (6, 2, 0)
NO_ACCESS = "the Redis user may not access this key (ACL key patterns): left alone"
NO_KEY = "no such key: fix streams.keys"


@dataclass(frozen=True)
class Skipped:
    """A key or group the run leaves alone, and why (shown in the summary)."""

    stream: str
    group: str | None
    reason: str


def check_server(client: redis.Redis, params: RedisParams) -> tuple[int, int, int]:
    """PING and version check; XAUTOCLAIM needs Redis 6.2+ (or Valkey)."""
    with redis_errors(params):
        client.ping()
        version = server_version(client)
    if version < MIN_VERSION:
        raise UnsupportedServerError(
            f"Redis {'.'.join(map(str, version))} has no XAUTOCLAIM: "
            "upgrade the server to Redis 6.2 or newer (or Valkey)"
        )
    return version


def selected_keys(client: redis.Redis, settings: Settings, params: RedisParams,
                  skipped: list[Skipped], warnings: list[str] | None = None
                  ) -> dict[str, bool]:
    """The keys ``streams.keys`` and ``streams.match`` select -> whether named explicitly:
    the explicit keys, then the SCAN MATCH hits in order; dead-letter streams left out (before
    any TYPE: the job's ACL user needs no read access to them), non-UTF-8 names skipped.
    None at all: ``matched_nothing`` is added to `warnings`, if given, and logged."""
    sel, rule = settings.streams, settings.dead_letter.names
    names = dict.fromkeys(sel.keys, True)
    if sel.match:
        with redis_errors(params):
            found = sorted(scan_keys(client, sel.match, sel.scan_count))
        for key in found:
            names.setdefault(key_text(key, skipped), False)
    selected = {}
    for name, explicit in names.items():
        if name and rule.is_dead_letter(name):
            log.info("skip %s: it is a dead-letter stream", name)
        elif name:
            selected[name] = explicit
    if not selected and warnings is not None:
        warn(warnings, matched_nothing(settings))
    return selected


def is_own_key(name: str, settings: Settings) -> bool:
    """True for a name of the job's own bookkeeping (any run's): a claim journal
    (``claim.journal_prefix`` and a job consumer's name: a prefix the user chose may hold
    other keys), a split cursor or range list, a run registration. Such a key
    that is not a stream is never a skipped source: the job leaves it alone, silently (each
    has a TTL, and its run deletes it when it finishes)."""
    journal = settings.claim.journal_prefix
    consumer = name[len(journal):] if journal and name.startswith(journal) else ""
    stem, _, part = consumer.rpartition("-")  # <consumer prefix>-<run id>-<part>
    own_journal = stem.startswith(f"{settings.claim.consumer_prefix}-") and part.isdigit()
    return own_journal or is_split_key(name) \
        or is_registration(name, settings.claim.consumer_prefix)


def matched_nothing(settings: Settings, what: str = "stream") -> str:
    """The warning for a selection (``streams.keys`` / ``streams.match``) that selected no
    `what`: a typo in a name or a pattern otherwise passes for a quiet day."""
    sel = settings.streams
    named = ([f"streams.keys {','.join(sel.keys)!r}"] if sel.keys else []) + (
        [f"streams.match {sel.match!r}"] if sel.match else [])
    return (f"{' and '.join(named)} matched no {what}: nothing was done; check the names, "
            "the pattern and dead_letter.suffix")


def warn(warnings: list[str], message: str) -> None:
    """Log `message` as a WARNING line and add it to `warnings` (a summary's)."""
    log.warning("%s", message)
    warnings.append(message)


def reply_or_raise(reply: object, params: RedisParams, stream: str | None = None,
                    group: str | None = None) -> object:
    """The reply, or its error raised as the job's typed error for that stream and group."""
    if isinstance(reply, Exception):
        with redis_errors(params, stream, group):
            raise reply
    return reply


def type_unless_denied(reply: object, params: RedisParams) -> str | None:
    """A TYPE reply as text; None when the ACL user may not access that key (SCAN lists every
    key, whatever the user's key patterns). A denied *command* still raises."""
    if key_refused(reply):
        return None
    kind = reply_or_raise(reply, params)
    return kind.decode() if isinstance(kind, bytes) else str(kind)


def key_text(key: bytes, skipped: list[Skipped]) -> str:
    """A SCAN hit as text; "" and a skip reason when its name is not UTF-8 (the job names
    keys as text)."""
    try:
        return key.decode("utf-8")
    except UnicodeDecodeError:
        skipped.append(Skipped(shown(key), None, "key name is not UTF-8: not supported"))
        return ""
