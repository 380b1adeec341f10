"""Dead-letter and retry stream names that always share their source's Redis Cluster hash slot.

Rule (README, "Dead-letter streams"): a key with a non-empty hash tag keeps it and gets the
suffix appended (``orders{eu}`` -> ``orders{eu}:dlq``); a key without any ``}`` is wrapped
into a tag (``orders`` -> ``{orders}:dlq``). Any other key (a ``}`` but no usable tag, e.g.
``a}b`` or ``x{}y``) has no such name and is refused. The result is always checked with the
real slot function, so a rule mistake can never produce a cross-slot move.
"""

from __future__ import annotations

from redis.crc import key_slot

from recovery.errors import DeadLetterNameError


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
    if key_slot(candidate.encode()) != key_slot(source.encode()):
        raise DeadLetterNameError(
            f"dead-letter name {candidate!r} would not share the hash slot of {source!r}: "
            "choose another dead_letter.suffix"
        )
    return candidate


def is_dead_letter_key(key: str, suffix: str) -> bool:
    """True for keys that are dead-letter streams themselves (never recovered from)."""
    return key.endswith(suffix)


def requeue_key(source: str, group: str, template: str | None) -> str:
    """Where requeued copies of `source`'s entries for `group` go: `source` itself without a
    template; else the template (``{stream}<suffix>``, the suffix maybe holding ``{group}``)
    named by the dead-letter rule, so it shares `source`'s hash slot. Raises
    DeadLetterNameError where no such name exists."""
    if template is None:
        return source
    return dead_letter_key(source, template.removeprefix("{stream}").replace("{group}", group))
