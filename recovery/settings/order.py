"""The ``[order]`` section: per-key ordered recovery (``recovery.executor.ordered``).

With a key field, a run in ``handler`` mode hands the entries of each key (the value of that
field) to the handler in stream-ID order, across everything the run claimed for the key; a
failed entry holds the rest of its key, pending (README, "Per-key order"; the rules:
docs/GUARANTEES.md, "Per-key order")."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from recovery.settings.base import Section


class OrderSettings(Section):
    """`key_field`: the entry field holding the ordering key (none: no order, as always);
    `key_fields`: stream pattern (``fnmatch``, e.g. ``"orders:*"``) -> field, the first
    pattern that matches a stream wins over `key_field` (``""``: that stream unordered);
    `missing_key`: an entry without the field is its own key (``own``), held (``hold``) or
    dead-lettered (``dead_letter``, ``x-death-reason`` ``order-key-missing``);
    `dead_letter_releases`: a head dead-lettered (at the delivery limit or by
    ``Result.dead_letter``) releases its key; ``false`` holds it, across runs and task
    retries, until an operator releases it: the move also records the head in a hash of
    the job's, ``<hold_prefix><stream>:<group>`` (``recovery.redis_io.key_holds``; its
    field the key, deleted to release it); `hold_prefix`: that name's prefix (no braces: the
    name takes the stream's hash slot); `scan_max`: pending entries read at most per other
    consumer and group, for the keys they hold back."""

    key_field: str | None = Field(None, min_length=1)
    key_fields: dict[str, str] = Field(default_factory=dict)
    missing_key: Literal["own", "hold", "dead_letter"] = "own"
    dead_letter_releases: bool = True
    hold_prefix: str = Field("recovery:held:", min_length=1)
    scan_max: int = Field(10_000, ge=1, le=1_000_000)

    @field_validator("key_fields")
    @classmethod
    def _patterns_named(cls, fields: dict[str, str]) -> dict[str, str]:
        if any(not pattern for pattern in fields):
            raise ValueError("a stream pattern is empty: name streams, e.g. \"orders:*\"")
        return fields

    @field_validator("hold_prefix")
    @classmethod
    def _no_braces(cls, prefix: str) -> str:
        if "{" in prefix or "}" in prefix:  # the stream's hash tag must decide the slot
            raise ValueError(f"{prefix!r} has a brace: the hold's name takes the stream's hash "
                             "slot from the stream's name; use e.g. \"recovery:held:\"")
        return prefix

    @property
    def ordered(self) -> bool:
        """Whether any stream is recovered in per-key order."""
        return bool(self.key_field) or any(self.key_fields.values())
