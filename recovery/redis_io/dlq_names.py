"""Dead-letter and retry stream names that always share their source's Redis Cluster hash slot.

Rule (README, "Dead-letter streams"): a key with a non-empty hash tag keeps it and gets the
suffix appended (``orders{eu}`` -> ``orders{eu}:dlq``); a key without any ``}`` is wrapped
into a tag (``orders`` -> ``{orders}:dlq``). Any other key (a ``}`` but no usable tag, e.g.
``a}b`` or ``x{}y``) has no such name and is refused. The result is always checked with the
real slot function, so a rule mistake can never produce a cross-slot move.

A team may name its dead-letter streams instead (``dead_letter.stream``, a template with
``{stream}`` and ``{group}``, ``{{`` / ``}}`` a literal brace): :class:`DeadLetterNames` is
the one rule every caller resolves names by, and :func:`refuse_cross_slot` refuses, on a
Redis Cluster, a name outside its source's slot (docs/CONFIGURATION.md, "Dead-letter stream
names").
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from string import Formatter
from typing import TYPE_CHECKING

from recovery.errors import REQUEUE_REFUSED, TARGET_REFUSED, DeadLetterNameError

if TYPE_CHECKING:  # redis-py is imported where a name is checked against a slot (slot_of)
    import redis

    from recovery.redis_io.error_codes import TargetRefused


def slot_of(key: str) -> int:
    """The Redis Cluster hash slot of `key` (0..16383), by redis-py's own slot function,
    imported on first use: the settings and the command line load this module, and a
    command refused before any name is checked need not load redis-py."""
    from redis.crc import key_slot

    return key_slot(key.encode())


def hash_tag(key: str) -> str | None:
    """The non-empty hash tag of `key` (between the first ``{`` and the next ``}``), or None."""
    start = key.find("{")
    if start < 0:
        return None
    end = key.find("}", start + 1)
    if end < 0 or end == start + 1:
        return None
    return key[start + 1 : end]


def dead_letter_key(source: str, suffix: str) -> str:
    """The dead-letter stream of `source`, in the same hash slot. Raises DeadLetterNameError."""
    if hash_tag(source) is not None:
        candidate = source + suffix
    elif "}" not in source:
        candidate = "{" + source + "}" + suffix
    else:
        raise DeadLetterNameError(
            f"stream {source!r} has a '}}' but no hash tag, so no dead-letter name can share "
            "its hash slot: rename the stream or give it a {tag}"
        )
    if slot_of(candidate) != slot_of(source):
        raise DeadLetterNameError(
            f"dead-letter name {candidate!r} would not share the hash slot of {source!r}: "
            "choose another dead_letter.suffix"
        )
    return candidate


def requeue_key(source: str, group: str, template: str | None) -> str:
    """Where requeued copies of `source`'s entries for `group` go: `source` itself without a
    template; else the template (``{stream}<suffix>``, the suffix maybe holding ``{group}``)
    named by the dead-letter rule, so it shares `source`'s hash slot. Raises
    DeadLetterNameError where no such name exists."""
    if template is None:
        return source
    return dead_letter_key(source, template.removeprefix("{stream}").replace("{group}", group))


PLACEHOLDERS = ("stream", "group")


def template_problem(template: str) -> str | None:
    """Why `template` is no dead-letter stream name (``{stream}`` and ``{group}`` only, a
    literal brace written ``{{`` / ``}}``, some fixed text), or None when it is one."""
    try:
        parsed = list(Formatter().parse(template))
    except ValueError as exc:
        return f"{exc}: write a literal brace as {{{{ or }}}}"
    for _, name, spec, conversion in parsed:
        if name is not None and (name not in PLACEHOLDERS or spec or conversion):
            shown = "{" + name + (f"!{conversion}" if conversion else "") + \
                (f":{spec}" if spec else "") + "}"
            return (f"unknown placeholder {shown}: use {{stream}} and {{group}} only, "
                    "and write a literal brace as {{ or }}, e.g. {{eu}}:dlq")
    if not any(literal for literal, *_ in parsed):
        return "it has no fixed text, so it could name a source: add some, e.g. {stream}:dlq"
    return None


@dataclass(frozen=True)
class DeadLetterNames:
    """The naming rule of dead-letter streams: without a `template`, the slot rule with
    `suffix` (:func:`dead_letter_key`: one stream per source); with one, the template filled
    in (``str.format`` with ``stream`` and ``group``), which may name one stream for many
    sources. Small and frozen: it travels to the executors in ``JobParams``."""

    suffix: str = ":dlq"
    template: str | None = None

    @property
    def per_group(self) -> bool:
        """Whether a name depends on the group (the template holds ``{group}``)."""
        return self.template is not None and any(
            name == "group" for _, name, _, _ in Formatter().parse(self.template))

    def key(self, stream: str, group: str) -> str:
        """The dead-letter stream of `stream`'s entries of `group`. Raises
        DeadLetterNameError where the slot rule has no name for `stream`."""
        if self.template is None:
            return dead_letter_key(stream, self.suffix)
        return self.template.format(stream=stream, group=group)

    def check_source(self, stream: str) -> None:
        """Raise DeadLetterNameError when `stream` can have no dead-letter stream (the slot
        rule's refusal; a template names every stream)."""
        if self.template is None:
            dead_letter_key(stream, self.suffix)

    def keys_of(self, stream: str, groups: Iterable[str]) -> list[str]:
        """The distinct dead-letter streams of `stream`'s `groups` (one without ``{group}``,
        whatever the groups; none for a per-group name without groups), in order."""
        if not self.per_group:
            return [self.key(stream, "")]
        return list(dict.fromkeys(self.key(stream, g) for g in groups))

    def is_dead_letter(self, key: str) -> bool:
        """True for keys that may be dead-letter streams by this rule, by their name alone:
        a name ending with the suffix, and with a template any name it can produce (the
        recovery run then decides by what the key holds: ``recovery.targets.keys``)."""
        return self.by_suffix(key) or self.by_template(key)

    def by_suffix(self, key: str) -> bool:
        """True for a name ending with the suffix (the slot rule's dead-letter streams)."""
        return key.endswith(self.suffix)

    def by_template(self, key: str) -> bool:
        """True for a name the template can produce (each placeholder: any text)."""
        return self.template is not None and _matcher(self.template).fullmatch(key) is not None

    def cross_slot(self, stream: str, key: str) -> str | None:
        """The refusal when `stream`'s dead-letter stream `key` is not in its Redis Cluster
        hash slot (a script over both could not run there), else None."""
        if slot_of(key) == slot_of(stream):
            return None
        return (f"dead_letter.stream {self.template!r} names {key!r} for stream {stream!r}, "
                "another Redis Cluster hash slot: give the name the stream's hash tag, e.g. "
                "{{{stream}}}:dlq, or dlq{{eu}} for streams tagged {eu}")


# The fields every dead letter carries (dead_letter.lua writes them; its target check reads
# them): a stream whose newest entry has them all holds the job's letters.
LETTER_FIELDS = (b"x-original-stream", b"x-original-id", b"x-death-reason")
PROBE_STREAMS = ("orders", "orders{eu}")  # for templates checked without a selection
PROBE_GROUP = "g"


def is_letter(fields: Iterable[bytes]) -> bool:
    """Whether an entry with these field names carries the job's metadata block."""
    names = set(fields)
    return all(f in names for f in LETTER_FIELDS)


def name_clash(names: DeadLetterNames, keys: Iterable[str], groups: Iterable[str],
               requeue: str | None) -> str | None:
    """Why `names` cannot go with this selection, decided before Redis is read, or None:
    the dead-letter name of a selected (stream, group) is a key named in `keys` (a source),
    or the requeue template names the same stream for it. Selected streams and groups are
    the probes (examples stand in for those not named); what only discovery can tell is
    checked then (``recovery.targets.keys.drop_dead_letter_streams``,
    ``recovery.executor.handover.modes.requeue.RequeueMode.check_units``)."""
    keys = list(keys)
    rule = (f"dead_letter.stream {names.template!r}" if names.template is not None
            else f"dead_letter.suffix {names.suffix!r}")
    for stream in dict.fromkeys([*keys, *PROBE_STREAMS]):
        for group in list(groups) or [PROBE_GROUP]:
            try:
                dlq = names.key(stream, group)
            except DeadLetterNameError:
                continue
            if names.template is not None and (dlq in keys or dlq == stream):
                return (f"{rule} names the selected source "
                        f"{dlq!r} as the dead-letter stream of {stream!r}: letters would be "
                        "read as new messages; choose a name no source has, e.g. "
                        "{{{stream}}}:dlq")
            if requeue is not None and _requeue_name(stream, group, requeue) == dlq:
                return (f"{rule} and reprocess.requeue_stream "
                        f"{requeue!r} both name {dlq!r} (stream {stream!r}, group "
                        f"{group!r}): requeued copies and dead letters would share it; give "
                        "them different fixed text, e.g. {{{stream}}}:dlq:{group}")
    return None


def _requeue_name(stream: str, group: str, template: str) -> str | None:
    try:
        return requeue_key(stream, group, template)
    except DeadLetterNameError:
        return None


@lru_cache(maxsize=8)
def _matcher(template: str) -> re.Pattern[str]:
    """A regular expression for every name `template` produces (a placeholder: any text)."""
    parts = [re.escape(literal) + ("" if name is None else "(?s:.*)")
             for literal, name, _, _ in Formatter().parse(template)]
    return re.compile("".join(parts))


def refuse_cross_slot(client: redis.Redis, names: DeadLetterNames,
                      pairs: Iterable[tuple[str, str]]) -> None:
    """On a Redis Cluster, raise DeadLetterNameError (exit 2) naming the first (source
    stream, dead-letter stream) of `pairs` in different hash slots, and how many more: the
    run is refused before it touches anything. A standalone server takes any names; the
    slot rule always shares the slot."""
    from redis.cluster import RedisCluster

    if names.template is None or not isinstance(client, RedisCluster):
        return
    refusals = [r for s, k in dict.fromkeys(pairs) if (r := names.cross_slot(s, k)) is not None]
    if refusals:
        more = f" ({len(refusals) - 1} more streams alike)" if len(refusals) > 1 else ""
        raise DeadLetterNameError(refusals[0] + more)


def labels(pairs: Iterable[tuple[str, str]]) -> dict[str, str]:
    """Dead-letter stream -> the name it is listed under in the summaries and metrics: its
    source stream where only one of `pairs` (source, dead-letter stream) names it, else its
    own name (a stream shared by several sources is listed once, never summed per source)."""
    sources: dict[str, set[str]] = {}
    for source, key in pairs:
        sources.setdefault(key, set()).add(source)
    return {key: next(iter(s)) if len(s) == 1 else key for key, s in sources.items()}


def refused_reason(dlq: str, refused: TargetRefused) -> str:
    """The report reason (and the summary's skipped row) of an entry whose dead-letter
    stream `dlq` the move script refused: what the key is, and the fix."""
    if refused.kind != "stream":
        found = f"is a {refused.kind}, not a stream"
        fix = "delete or rename that key, or set dead_letter.stream to a name of the job's own"
    elif "source" in refused.why:
        found, fix = "is the source stream itself", "set dead_letter.stream to another name"
    else:
        found = "holds entries without the dead-letter metadata (another application's stream)"
        fix = ("set dead_letter.stream to a name no application uses, e.g. "
               "{{{stream}}}:dlq:{group}, or move that stream away")
    return (f"{TARGET_REFUSED}{dlq!r} {found}; nothing was written and the over-limit "
            f"entries stay pending: {fix}")


def refused_requeue_reason(target: str, refused: TargetRefused) -> str:
    """The report reason (and the summary's skipped row) of an entry whose requeue target
    the requeue script refused: a key of another type, or a stream of dead letters (its
    oldest entry carries the metadata block); nothing written, it stays pending."""
    if refused.kind == "stream":
        return (f"{REQUEUE_REFUSED}{target!r} holds dead letters (its oldest entry carries "
                "the dead-letter metadata); nothing was written and the entries stay "
                "pending: set reprocess.requeue_stream to a name of the job's own, or move "
                "those letters away (jobs/redrive.py)")
    return (f"{REQUEUE_REFUSED}{target!r} is a {refused.kind}, not a stream; nothing was "
            "written and the entries stay pending: delete or rename that key, or set "
            "reprocess.requeue_stream to a name of the job's own")
