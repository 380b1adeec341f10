"""Driver side: which dead-letter streams the config points at, what each one is (type,
length, oldest entry), and the warnings their length and age raise.

Three pipelined commands per dead-letter stream (TYPE, XLEN, XRANGE - + COUNT 1), a round
trip per ~330 streams; all granted to the documented recovery user (docs/ACL.md). The
recovery run calls :func:`dead_letter_warnings` too, only when a threshold is set.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass

from recovery.errors import DeadLetterNameError
from recovery.redis_io.cluster import node_of
from recovery.redis_io.commands import (
    HEAD_COMMANDS,
    head_commands,
    stream_groups,
    stream_head,
    type_command,
)
from recovery.redis_io.dlq_names import DeadLetterNames, labels
from recovery.redis_io.redis_conn import RedisConn
from recovery.redis_io.round_trips import each
from recovery.redis_io.streams import info_rows, shown
from recovery.rows import DeadLetterWarning, Skipped
from recovery.settings.model import Settings
from recovery.targets.keys import sources_by_content, type_unless_denied

log = logging.getLogger(__name__)
STATS_COMMANDS = 1 + HEAD_COMMANDS  # per dead-letter stream: TYPE, XLEN, XRANGE - + COUNT 1
DENIED = "denied"  # the kind of a key the ACL user may not access (its key patterns)


@dataclass(frozen=True)
class DeadLetterStream:
    """One dead-letter stream as found, listed once (`source`: its source stream, or its
    own name where several sources share it, ``dlq_names.labels``): `kind` is its TYPE
    (``stream``, ``none`` when missing, or another type); `length` its XLEN (0 unless a
    stream); `oldest_ms` the time part of its first entry's ID, when it was added (epoch ms;
    None when empty); `node` the primary that owns it on a Redis Cluster (``host:port``; ""
    on a standalone server)."""

    source: str
    key: str
    kind: str
    length: int = 0
    oldest_ms: int | None = None
    node: str = ""
    sources: tuple[str, ...] = ()  # every selected stream whose letters it holds

    @property
    def status(self) -> str:
        """``read`` (a stream with entries), ``empty``, ``missing``, ``denied`` (the ACL user
        may not access it) or ``wrong-type``."""
        if self.kind in ("none", DENIED):
            return "missing" if self.kind == "none" else DENIED
        if self.kind != "stream":
            return "wrong-type"
        return "read" if self.length else "empty"

    def oldest_age_s(self, now_ms: int) -> float | None:
        """Seconds since its oldest entry was added (None when it has none)."""
        return None if self.oldest_ms is None else round((now_ms - self.oldest_ms) / 1000, 3)


def dead_letter_pairs(conn: RedisConn, settings: Settings, skipped: list[Skipped],
                      groups: Sequence[str] = ()) -> list[tuple[str, str]]:
    """(source stream, dead-letter stream) for every key ``streams.keys`` /
    ``streams.match`` select and each distinct dead-letter name of it (``dead_letter``
    settings); a key without a valid dead-letter name is added to `skipped`."""
    return name_pairs(conn, settings.dead_letter.names,
                      list(sources_by_content(conn, settings, skipped)), skipped, groups)


def name_pairs(conn: RedisConn, names: DeadLetterNames, sources: Sequence[str],
               skipped: list[Skipped], groups: Sequence[str] = ()) -> list[tuple[str, str]]:
    """(source, dead-letter stream) for each of `sources` and each distinct name `names`
    give it: one per source, or, for a name per group, one per group of the source (its
    XINFO GROUPS, pipelined, and the `groups` given: a redrive's filter names groups of a
    stream that is gone). A source the slot rule has no name for goes to `skipped`."""
    named = []
    for source in sources:
        try:
            names.check_source(source)
            named.append(source)
        except DeadLetterNameError as exc:
            skipped.append(Skipped(source, None, str(exc)))
    groups_of = {source: list(groups) for source in named}
    if names.per_group and named:
        with conn.errors():
            replies = stream_groups(conn.client, named)
        for source, reply in zip(named, replies, strict=True):
            found = [] if isinstance(reply, Exception) else [
                shown(g["name"]) for g in info_rows(reply)]  # type: ignore[arg-type]
            groups_of[source] = list(dict.fromkeys([*found, *groups]))
    return [(s, key) for s in named for key in names.keys_of(s, groups_of[s])]


def inspect_streams(conn: RedisConn, pairs: list[tuple[str, str]]
                    ) -> list[DeadLetterStream]:
    """Type, length and oldest entry of each distinct dead-letter stream of `pairs`,
    pipelined. A key the ACL user may not access is of kind ``denied``; a refused command
    raises the job's RedisPermissionError."""
    label = labels(pairs)
    sources: dict[str, list[str]] = {}  # appended to: a tuple copied per source was quadratic
    for source, key in pairs:
        sources.setdefault(key, []).append(source)
    commands = [c for key in label for c in (type_command(key), *head_commands(key))]
    with conn.errors():
        replies = each(conn.client, commands)
    found = []
    for i, key in enumerate(label):
        reply, *head_replies = replies[i * STATS_COMMANDS : (i + 1) * STATS_COMMANDS]
        kind = type_unless_denied(reply, conn) or DENIED
        if kind != "stream":
            found.append(DeadLetterStream(label[key], key, kind, sources=tuple(sources[key])))
            continue
        head = conn.checked(stream_head(*head_replies), key)
        found.append(DeadLetterStream(label[key], key, kind, head.length, head.oldest_ms,
                                      node_of(conn.client, key), tuple(sources[key])))
    return found


def warnings_for(streams: list[DeadLetterStream], warn_length: int | None,
                 warn_oldest_age_s: float | None, now_ms: int) -> list[DeadLetterWarning]:
    """One warning per threshold a dead-letter stream reaches (length at least `warn_length`
    entries; oldest entry at least `warn_oldest_age_s` s old), each logged."""
    found: list[DeadLetterWarning] = []
    for s in streams:
        age = s.oldest_age_s(now_ms)
        if warn_length is not None and s.length >= warn_length:
            found.append(_warning(s, "length", s.length, warn_length))
        if warn_oldest_age_s is not None and age is not None and age >= warn_oldest_age_s:
            found.append(_warning(s, "oldest_age_s", age, warn_oldest_age_s))
    return found


def _warning(s: DeadLetterStream, what: str, value: float, threshold: float
             ) -> DeadLetterWarning:
    log.warning("dead-letter stream %s (of %s): %s %s reaches dead_letters.warn_%s %s",
                s.key, s.source, what, value, what, threshold)
    return DeadLetterWarning(s.source, s.key, what, value, threshold)


def now_ms() -> int:
    """The driver's clock, epoch ms."""
    return time.time_ns() // 1_000_000


def dead_letter_warnings(conn: RedisConn, settings: Settings) -> list[DeadLetterWarning]:
    """The recovery run's check: the warnings of the dead-letter streams of every selected
    stream; nothing is read when no threshold is set."""
    d = settings.dead_letters
    if d.warn_length is None and d.warn_oldest_age_s is None:
        return []
    streams = inspect_streams(conn, dead_letter_pairs(conn, settings, []))
    return warnings_for(streams, d.warn_length, d.warn_oldest_age_s, now_ms())
