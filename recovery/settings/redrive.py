"""The ``[redrive]`` settings section: what ``jobs/redrive.py`` moves from dead-letter streams
back to their sources (validated on the driver, part of ``recovery.settings.model.Settings``)."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

from pydantic import Field, field_validator, model_validator

from recovery.schemas import DeathReason
from recovery.settings.base import Section

STREAM_ID_BOUND = r"^(-|\+|\d+(-\d+)?)$"


class RedriveSettings(Section):
    """What ``jobs/redrive.py`` moves from dead-letter streams back to their sources.

    Source streams are chosen by ``streams.keys`` / ``streams.match`` and their dead-letter
    streams named by ``dead_letter.suffix`` or ``dead_letter.stream``, as for the recovery
    run (a shared one gives each source only its letters). Every filter narrows:
    ``groups`` (x-original-group) and ``reasons`` (x-death-reason: a ``DeathReason`` value),
    empty = all; ``from_id`` / ``to_id``, inclusive dead-letter entry IDs; ``since`` /
    ``until``, the time an entry was dead-lettered (the time part of its dead-letter ID;
    ISO 8601, UTC if no zone, or epoch);
    ``limit`` entries in all. ``max_entries_per_s`` caps moves per second (all streams).
    """

    groups: list[str] = Field(default_factory=list)
    reasons: list[str] = Field(default_factory=list)
    from_id: str = "-"
    to_id: str = "+"
    since: datetime | None = None
    until: datetime | None = None
    limit: int | None = Field(None, ge=1)
    max_entries_per_s: float | None = Field(None, gt=0)
    batch_size: int = Field(100, ge=1, le=5000)
    dry_run: bool = False

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
