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
    ``Result.dead_letter``) releases its key; ``false`` (hold it) is refused until a held key
    can be kept held across runs and task retries (nothing remembers a head once it left the
    PEL); `scan_max`: pending entries read at most per other consumer and group, for the
    keys they hold back."""

    key_field: str | None = Field(None, min_length=1)
    key_fields: dict[str, str] = Field(default_factory=dict)
    missing_key: Literal["own", "hold", "dead_letter"] = "own"
    dead_letter_releases: bool = True
    scan_max: int = Field(10_000, ge=1, le=1_000_000)

    @field_validator("key_fields")
    @classmethod
    def _patterns_named(cls, fields: dict[str, str]) -> dict[str, str]:
        if any(not pattern for pattern in fields):
            raise ValueError("a stream pattern is empty: name streams, e.g. \"orders:*\"")
        return fields

    @field_validator("dead_letter_releases")
    @classmethod
    def _releases_only(cls, releases: bool) -> bool:
        if not releases:  # an option the job cannot honour is refused, never half-kept
            raise ValueError(
                "false is not supported yet: a key would stay held only within one run (the "
                "next run, or a retried task, no longer sees the dead-lettered head and hands "
                "the key's later entries over); leave it true, and redrive or stop by hand")
        return releases

    @property
    def ordered(self) -> bool:
        """Whether any stream is recovered in per-key order."""
        return bool(self.key_field) or any(self.key_fields.values())
