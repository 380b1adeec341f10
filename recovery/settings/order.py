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
    """Per-key order: which field holds each stream's ordering key, and what an entry
    without one, or a dead-lettered head, does to its key (each field's description)."""

    key_field: str | None = Field(None, min_length=1, description=(
        "per-key order: the entry field whose value is the ordering key; entries of one key "
        "are handed to the handler in ID order, a failed one holds the rest of its key "
        "(`held`); none: no order. `handler` mode only (requeue / reassign refused, exit 2), "
        "not with `--plan`: [docs/GUARANTEES.md](docs/GUARANTEES.md#per-key-order)"))
    key_fields: dict[str, str] = Field(default_factory=dict, description=(
        "stream pattern (fnmatch, e.g. `\"orders:*\"`) -> key field; the first pattern that "
        "matches a stream wins over `key_field`; `\"\"`: that stream unordered (TOML: "
        "`key_fields = { \"payments:*\" = \"account_id\" }`)"))
    missing_key: Literal["own", "hold", "dead_letter"] = Field("own", description=(
        "an entry without the key field: `own` (its own key, never held by others), `hold` "
        "(held, pending, until the setting changes) or `dead_letter` (moved to its "
        "dead-letter stream, `x-death-reason` `order-key-missing`)"))
    dead_letter_releases: bool = Field(True, description=(
        "a head dead-lettered (at the delivery limit, by `Result.dead_letter`) lets its key "
        "go on; `false` holds the key, in this run, a retried task and every later run, until "
        "an operator releases it: the move records the key in a hash of the job's in the same "
        "script call ([docs/OPERATIONS.md](docs/OPERATIONS.md#keys-held-behind-a-dead-letter)); "
        "setting it back to `true` releases every such key (the hashes are then not read)"))
    hold_prefix: str = Field("recovery:held:", min_length=1, description=(
        "with `order.dead_letter_releases = false`: the prefix of the hashes of held keys, one "
        "per stream and group, `<prefix>{<stream>}/<group>` (a stream with a hash tag: "
        "`<prefix>{<tag>}/<stream>/<group>`; the hash shares the stream's hash slot); no "
        "braces (exit 2). Each prefix used is recorded in the set `recovery:held:prefixes`; a "
        "run finding holds under another one refuses to start (exit 2) with the command that "
        "moves them ([docs/OPERATIONS.md](docs/OPERATIONS.md#keys-held-behind-a-dead-letter)). "
        "A stream whose name has a `}` but no hash tag is skipped, as for its dead-letter "
        "stream"))
    scan_max: int = Field(10_000, ge=1, le=1_000_000, description=(
        "entries pending on other consumers read at most per consumer and group to find the "
        "keys they hold back across runs (one MULTI/EXEC snapshot per group: "
        "[docs/GUARANTEES.md](docs/GUARANTEES.md#per-key-order)); past that bound every later "
        "entry of the group is held"))

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
