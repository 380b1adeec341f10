"""The ``[claim]`` settings section: how entries are claimed, and the backoff schedule
(validated on the driver, part of ``recovery.settings.model.Settings``; executors get
``recovery.params.JobParams``)."""

from __future__ import annotations

from pydantic import Field, field_validator, model_validator

from recovery.settings.base import Section

MAX_BACKOFF_FACTOR = 1000


class ClaimSettings(Section):
    """How entries are claimed."""

    min_idle_ms: int = Field(60_000, ge=1)
    count: int = Field(1000, ge=1, le=10_000)
    max_deliveries: int = Field(5, ge=1)
    consumer_prefix: str = Field("recovery", pattern=r"^[\w.:-]+$")
    max_entries_per_s: float | None = Field(None, gt=0)
    journal_prefix: str = "recovery:journal:"  # "": no journal (see docs/ACL.md)
    # Backoff by delivery count (off by default): an entry delivered k times is due once idle
    # min_idle_ms * backoff_factor^(k-1) ms, at most backoff_max_ms (README "Backoff").
    backoff_factor: float | None = None
    backoff_max_ms: int | None = Field(None, ge=1)

    @field_validator("backoff_factor")
    @classmethod
    def _factor_shape(cls, factor: float | None) -> float | None:
        if factor is not None and not 1 <= factor <= MAX_BACKOFF_FACTOR:
            raise ValueError(
                f"{factor:g} is not a backoff factor: a schedule only lengthens the wait, so use "
                f"a number from 1 (no schedule) to {MAX_BACKOFF_FACTOR}, e.g. 2 (each delivery "
                "doubles the wait), or leave it unset")
        return factor

    @model_validator(mode="after")
    def _backoff_shape(self) -> ClaimSettings:
        if self.backoff_max_ms is not None and self.backoff_max_ms < self.min_idle_ms:
            raise ValueError(
                f"backoff_max_ms ({self.backoff_max_ms}) is below min_idle_ms "
                f"({self.min_idle_ms}): the longest wait cannot be shorter than the first; "
                "raise backoff_max_ms or leave it unset")
        return self
