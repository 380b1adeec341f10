"""Which keys a job works on, shared by the recovery run, the redrive and the dead-letter
job: the server check, the streams the ``[streams]`` selection names or matches (dead-letter
streams left out), and why a key is left alone (:class:`Skipped`)."""

from __future__ import annotations

import logging

import redis

from recovery.errors import ConfigError, DeadLetterNameError, UnsupportedServerError
from recovery.redis_io.commands import (
    key_types,
    oldest_entries,
    stream_info,
    stream_infos,
)
from recovery.redis_io.dlq_names import DeadLetterNames, is_letter, refused_reason
from recovery.redis_io.error_codes import TargetRefused
from recovery.redis_io.features import (
    ServerFeatures,
    check_may_run_xackdel,
    probe_features,
)
from recovery.redis_io.redis_conn import RedisConn, key_refused, no_such_key, wrong_type
from recovery.redis_io.run_ids import is_registration
from recovery.redis_io.split_cursors import is_split_key
from recovery.redis_io.streams import scan_keys, server_version, shown
from recovery.rows import Skipped
from recovery.settings.model import Settings

log = logging.getLogger(__name__)

MIN_VERSION = (6, 2, 0)
NO_ACCESS = "the Redis user may not access this key (ACL key patterns): left alone"
NO_KEY = "no such key: fix streams.keys"


def check_server(conn: RedisConn) -> tuple[int, int, int]:
    """PING and version check; XAUTOCLAIM needs Redis 6.2+ (or Valkey)."""
    with conn.errors():
        conn.client.ping()
        version = server_version(conn.client)
    if version < MIN_VERSION:
        raise UnsupportedServerError(
            f"Redis {'.'.join(map(str, version))} has no XAUTOCLAIM: "
            "upgrade the server to Redis 6.2 or newer (or Valkey)"
        )
    return version


def check_features(conn: RedisConn, settings: Settings) -> ServerFeatures:
    """What the server offers (``probe_features``: one round trip), and a ConfigError (exit
    2) for a setting it cannot honour: ``reprocess.delete_acked`` needs XACKDEL (Redis 8.2+).
    Before anything is written."""
    with conn.errors():
        features = probe_features(conn.client)
    if settings.reprocess.delete_acked and not features.xackdel:
        needs = "reprocess.delete_acked = true needs XACKDEL (Redis 8.2 or newer)"
        if features.asked:
            raise ConfigError(f"{needs}, which {features.name} does not have: unset "
                              "reprocess.delete_acked or run on Redis 8.2 or newer")
        raise ConfigError(f"{needs}, and the server refused COMMAND INFO, which asks it (the "
                          "Redis user may not run it, or COMMAND is renamed or disabled): "
                          "grant +command (docs/ACL.md line 7) or unset reprocess.delete_acked")
    if settings.reprocess.delete_acked:
        with conn.errors():
            check_may_run_xackdel(conn.client)
    return features


def selected_keys(conn: RedisConn, settings: Settings, skipped: list[Skipped],
                  warnings: list[str] | None = None, undecided: set[str] | None = None
                  ) -> dict[str, bool]:
    """The keys ``streams.keys`` and ``streams.match`` select -> whether named explicitly:
    the explicit keys, then the SCAN MATCH hits in order; dead-letter streams left out (before
    any TYPE: the job's ACL user needs no read access to them), non-UTF-8 names skipped.
    With `undecided` (the recovery run, the redrive and the dead-letter read), a key the
    naming rule could make (it ends with the suffix, or the template's pattern names it) is
    kept and added to it, unless named in ``streams.keys`` by a dead-letter suffix (refused
    with a WARNING): ``drop_dead_letter_streams`` decides it by what it holds once the
    groups are known. None at all: ``matched_nothing`` is added to `warnings`, if given, and
    logged."""
    sel, rule = settings.streams, settings.dead_letter.names
    names = dict.fromkeys(sel.keys, True)
    if sel.match:
        with conn.errors():
            found = sorted(scan_keys(conn.client, sel.match, sel.scan_count))
        for key in found:
            names.setdefault(key_text(key, skipped), False)
    selected = {}
    for name, explicit in names.items():
        if name and undecided is not None and rule.is_dead_letter(name) \
                and not (explicit and rule.by_suffix(name)):
            undecided.add(name)
            selected[name] = explicit
        elif name and rule.is_dead_letter(name) and explicit:
            reason = by_name_reason(rule, name)
            log.warning("skip %s: %s", name, reason)
            skipped.append(Skipped(name, None, reason))
        elif name and rule.is_dead_letter(name):
            log.info("skip %s: it is a dead-letter stream", name)
        elif name:
            selected[name] = explicit
    if not selected and warnings is not None:
        warn(warnings, matched_nothing(settings))
    return selected


def by_name_reason(rule: DeadLetterNames, name: str) -> str:
    """Why a key named in ``streams.keys`` is left out by its name alone (it ends with
    ``dead_letter.suffix``, or ``dead_letter.stream`` can make it): never silently."""
    which = (f"ends with dead_letter.suffix {rule.suffix!r}" if rule.by_suffix(name)
             else f"is a name dead_letter.stream {rule.template!r} can make")
    return (f"named in streams.keys, but it {which}, so it is taken for a dead-letter "
            "stream and never used as a source: rename the stream, or change "
            "dead_letter.suffix / dead_letter.stream")


def drop_dead_letter_streams(client: redis.Redis, settings: Settings,
                             streams: list[tuple[str, list[str]]], undecided: set[str],
                             skipped: list[Skipped]) -> set[str]:
    """Which of the `undecided` streams (of `streams`: (stream, its selected groups)) are
    dead-letter streams, never recovered: those holding letters (empty, or their oldest entry
    carries the metadata block, and their newest too where XINFO STREAM answers), left out
    quietly; and those the template names for a selected (stream, group) (where this run
    writes its letters), left out with a WARNING and a `skipped` row when they hold anything
    else. Any other stream the template could name is
    a source. Raises DeadLetterNameError (exit 2) when such a stream, holding no letters, is
    named in ``streams.keys`` (the run would never recover it), or when it is this run's
    dead-letter stream, empty and with consumer groups of its own, and selected: an empty
    application stream and an emptied dead-letter stream look alike."""
    names = settings.dead_letter.names
    owner: dict[str, tuple[str, str]] = {}
    for stream, groups in streams:
        for group in groups:
            key = _dead_letter_name(names, stream, group)
            if key is not None and key != stream:
                owner.setdefault(key, (stream, group))
    checked = [stream for stream, _ in streams if stream in undecided]
    replies = oldest_entries(client, checked)
    # A letter first is not enough: the newest entry too, where XINFO STREAM answers (as
    # the move script checks it), so an application's stream never passes for one.
    lettered = [key for key, reply in zip(checked, replies, strict=True)
                if isinstance(reply, list) and reply and holds_letters(reply)]
    newest = dict(zip(lettered, stream_infos(client, lettered), strict=True))
    dropped = set()
    groups_of = dict(streams)
    for key, reply in zip(checked, replies, strict=True):
        if reply == [] and key in owner and groups_of.get(key):
            raise DeadLetterNameError(
                f"{key!r} is selected as a source (consumer groups "
                f"{', '.join(groups_of[key])}) and named by dead_letter.stream "
                f"{names.template!r} as the dead-letter stream of {owner[key][0]} / "
                f"{owner[key][1]}; it is empty, so nothing tells a dead-letter stream read by "
                "a team's group from an application stream: narrow streams.match so it is not "
                "selected, or set dead_letter.stream to a name no application uses")
        if holds_letters(reply) and newest_is_letter(newest.get(key)):
            log.info("skip %s: it is a dead-letter stream", key)
            dropped.add(key)
            continue
        if key not in owner:
            continue  # a name the template could make, but no selected unit's: a source
        stream, group = owner[key]
        reason = (f"dead_letter.stream {names.template!r} names {key!r} as the dead-letter "
                  f"stream of {stream} / {group}, but it holds entries without the "
                  "dead-letter metadata: set dead_letter.stream to a name no application "
                  "uses, e.g. {{{stream}}}:dlq:{group}")
        if key in settings.streams.keys:
            raise DeadLetterNameError(f"streams.keys selects {key!r}, yet {reason}")
        log.warning("skip %s: not recovered: %s", key, reason)
        skipped.append(Skipped(key, None, f"not recovered: {reason}"))
        dropped.add(key)
    return dropped


def sources_by_content(conn: RedisConn, settings: Settings, skipped: list[Skipped]
                       ) -> dict[str, bool]:
    """``selected_keys`` for the redrive and the dead-letter read: a key only the template's
    pattern names (``orders:v2`` under ``{stream}:{group}``) is left out when it holds
    letters (its oldest entry, and its newest where XINFO STREAM answers, carry the metadata
    block), else it is a source like any other; a missing or empty one stays a source (a
    redrive re-creates a source that is gone)."""
    undecided: set[str] = set()
    selected = selected_keys(conn, settings, skipped, None, undecided)
    drop_other_types(conn, selected, skipped)
    if not undecided:
        return selected
    checked = [key for key in selected if key in undecided]
    with conn.errors():
        oldest = oldest_entries(conn.client, checked)
        lettered = [key for key, reply in zip(checked, oldest, strict=True)
                    if isinstance(reply, list) and reply and holds_letters(reply)]
        newest = stream_infos(conn.client, lettered)
    for key, reply in zip(lettered, newest, strict=True):
        if newest_is_letter(reply):
            log.info("skip %s: it is a dead-letter stream", key)
            del selected[key]
    return selected


def drop_other_types(conn: RedisConn, selected: dict[str, bool], skipped: list[Skipped]
                     ) -> None:
    """Leave out of `selected` (``selected_keys``) the keys only ``streams.match`` found
    that hold another type than a stream (TYPE, pipelined), each with a `skipped` row as the
    recovery run's discovery gives it: they are no source, and have no dead letters. A key
    named in ``streams.keys``, a missing key and a TYPE the ACL user may not send stay."""
    matched = [key for key, explicit in selected.items() if not explicit]
    if not matched:
        return
    with conn.errors():
        kinds = key_types(conn.client, matched)
    for key, kind in zip(matched, kinds, strict=True):
        kind = kind.decode() if isinstance(kind, bytes) else kind
        if isinstance(kind, str) and kind not in ("stream", "none"):
            log.info("skip %s: not a stream (type %s)", key, kind)
            skipped.append(Skipped(key, None, f"not a stream (type {kind}): left alone"))
            del selected[key]


def _dead_letter_name(names: DeadLetterNames, stream: str, group: str) -> str | None:
    try:
        return names.key(stream, group)
    except DeadLetterNameError:
        return None


def holds_letters(reply: object) -> bool:
    """Whether a stream's ``XRANGE key - + COUNT 1`` reply (raw) shows one that may hold dead
    letters: empty, or its oldest entry carries the metadata block (XRANGE: every documented
    ACL rule grants it). An error reply: False."""
    if not isinstance(reply, list):
        return False
    if not reply:
        return True
    return is_letter(reply[0][1][::2])


def may_read_stream_info(client: redis.Redis, key: str) -> bool:
    """Whether the ACL user may run XINFO STREAM (asked on `key`, a selected stream): the
    move script then checks the newest entry of each dead-letter stream too. Only a refusal
    of the command says no (a missing key, another type or a key pattern say yes)."""
    try:
        stream_info(client, key)
    except redis.exceptions.NoPermissionError as exc:
        return key_refused(exc)
    except redis.exceptions.ResponseError as exc:
        return no_such_key(exc) or wrong_type(exc)
    return True


def newest_is_letter(reply: object) -> bool:
    """Whether an ``XINFO STREAM key`` reply (raw) shows no newest entry or a newest entry
    that carries the metadata block. An error reply: True (left to the move script)."""
    if isinstance(reply, list):  # raw: name, value, ...
        info = {(k.decode() if isinstance(k, bytes) else k): v
                for k, v in zip(reply[::2], reply[1::2], strict=False)}
    elif isinstance(reply, dict):  # parsed (a cluster pipeline)
        info = {(k.decode() if isinstance(k, bytes) else k): v for k, v in reply.items()}
    else:
        return True
    entry = info.get("last-entry")
    if not entry:
        return True
    fields = entry[1]
    return is_letter(fields.keys() if isinstance(fields, dict) else fields[::2])


def refused_targets(client: redis.Redis, names: DeadLetterNames,
                    pairs: list[tuple[str, str]], newest: bool = False) -> list[Skipped]:
    """A dry run's view of the move script's target check (``dead_letter.lua``): a skipped
    row, with the reason a real run would give, per (stream, group) of `pairs` whose
    dead-letter stream is the source itself, a key of another type or a stream whose oldest
    entry is no letter (and, with `newest`, as the move script then checks, a stream whose
    newest entry is no letter). Keys the user may not read are left to the real run."""
    targets: dict[tuple[str, str], str] = {}
    for stream, group in pairs:
        key = _dead_letter_name(names, stream, group)
        if key is not None:
            targets[(stream, group)] = key
    distinct = list(dict.fromkeys(targets.values()))
    kinds = key_types(client, distinct)
    oldest = oldest_entries(client, distinct)
    refusals: dict[str, TargetRefused] = {}
    for key, kind, first in zip(distinct, kinds, oldest, strict=True):
        kind = kind.decode() if isinstance(kind, bytes) else kind
        if isinstance(kind, Exception) or kind == "none":
            continue
        if kind != "stream":
            refusals[key] = TargetRefused(str(kind), "it is no stream")
        elif not holds_letters(first):
            refusals[key] = TargetRefused("stream", "its oldest entry carries no metadata")
        elif newest and first:
            last = stream_infos(client, [key])[0]
            if not newest_is_letter(last):
                refusals[key] = TargetRefused("stream", "its newest entry carries no metadata")
    rows = []
    for (stream, group), key in targets.items():
        refusal = refusals.get(key)
        if key == stream:
            refusal = TargetRefused("stream", "it is the source stream itself")
        if refusal is not None:
            rows.append(Skipped(stream, group, refused_reason(key, refusal)))
    return rows


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


def type_unless_denied(reply: object, conn: RedisConn) -> str | None:
    """A TYPE reply as text; None when the ACL user may not access that key (SCAN lists every
    key, whatever the user's key patterns). A denied *command* still raises."""
    if key_refused(reply):
        return None
    kind = conn.checked(reply)
    return kind.decode() if isinstance(kind, bytes) else str(kind)


def key_text(key: bytes, skipped: list[Skipped]) -> str:
    """A SCAN hit as text; "" and a skip reason when its name is not UTF-8 (the job names
    keys as text)."""
    try:
        return key.decode("utf-8")
    except UnicodeDecodeError:
        skipped.append(Skipped(shown(key), None, "key name is not UTF-8: not supported"))
        return ""
