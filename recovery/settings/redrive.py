"""The ``[redrive]`` settings section: what ``jobs/redrive.py`` moves from dead-letter streams
back to their sources (validated on the driver, part of ``recovery.settings.model.Settings``)."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

from pydantic import Field, field_validator, model_validator

from recovery.settings.base import Section
from recovery.vocabulary import DeathReason

STREAM_ID_BOUND = r"^(-|\+|\d+(-\d+)?)$"


class RedriveSettings(Section):
    """What ``jobs/redrive.py`` moves from dead-letter streams back to their sources.

    Source streams are chosen by ``streams.keys`` / ``streams.match`` and their dead-letter
    streams named by ``dead_letter.suffix`` or ``dead_letter.stream``, as for the recovery
    run (a shared one gives each source only its letters). Every filter narrows (each
    field's description)."""

    groups: list[str] = Field(default_factory=list, description=(
        "`jobs/redrive.py` moves only letters of these groups (`x-original-group`); empty: "
        "all. [docs/OPERATIONS.md](docs/OPERATIONS.md#redrive-dead-letters-back-to-their-source)"))
    reasons: list[str] = Field(default_factory=list, description=(
        "moves only letters of these reasons (`x-death-reason`: a known value, else exit 2); "
        "empty: all"))
    from_id: str = Field("-", description="the first dead-letter entry ID moved (inclusive)")
    to_id: str = Field("+", description="the last dead-letter entry ID moved (inclusive)")
    since: datetime | None = Field(None, description=(
        "moves only letters dead-lettered at or after this time (the time part of the "
        "dead-letter ID; ISO 8601, UTC if no zone, or epoch); none: no bound"))
    until: datetime | None = Field(None, description=(
        "moves only letters dead-lettered at or before this time, as `since`"))
    limit: int | None = Field(None, ge=1, description="letters moved at most in all; none: all")
    max_entries_per_s: float | None = Field(None, gt=0, description=(
        "moves per second at most, across all streams; none: no cap"))
    batch_size: int = Field(100, ge=1, le=5000, description="letters per atomic move")
    dry_run: bool = Field(False, description=(
        "count what would move, move nothing (`jobs/redrive.py --dry-run` sets it)"))

    @field_validator("groups", "reasons", mode="before")
    @classmethod
    def _split_commas(cls, value: Any) -> Any:
        return [v for v in value.split(",") if v] if isinstance(value, str) else value

    @field_validator("reasons", mode="after")
    @classmethod
    def _known_reasons(cls, reasons: list[str]) -> list[str]:
        known = [r.value for r in DeathReason]
        unknown = [r for r in reasons if r not in known]
        if unknown:  # a typo would match nothing and pass for "no such dead letters"
            raise ValueError(f"{', '.join(map(repr, unknown))} is not a dead-letter reason: "
                             f"use {', '.join(known)}")
        return reasons

    @field_validator("from_id", "to_id", mode="after")
    @classmethod
    def _stream_id(cls, value: str) -> str:
        if not re.match(STREAM_ID_BOUND, value):
            raise ValueError(f"{value!r} is not a stream ID: write 1700000000000-0, "
                             "a time in ms like 1700000000000, or - / +")
        return value

    @field_validator("since", "until", mode="after")
    @classmethod
    def _utc_if_naive(cls, value: datetime | None) -> datetime | None:
        if value is not None and value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value

    @model_validator(mode="after")
    def _time_range_not_empty(self) -> RedriveSettings:
        if self.since and self.until and self.since > self.until:
            raise ValueError("redrive.since is after redrive.until: swap them or drop one")
        return self
