"""The ``[claim]`` settings section: how entries are claimed, and the backoff schedule
(validated on the driver, part of ``recovery.settings.model.Settings``; executors get
``recovery.params.JobParams``)."""

from __future__ import annotations

from pydantic import Field, field_validator, model_validator

from recovery.settings.base import Section

MAX_BACKOFF_FACTOR = 1000


class ClaimSettings(Section):
    """How entries are claimed."""

    min_idle_ms: int = Field(60_000, ge=1, description=(
        "claim entries idle at least this long (ms)"))
    count: int = Field(1000, ge=1, le=10_000, description=(
        "XAUTOCLAIM COUNT (one call walks at most 10x this many PEL entries); under a backoff "
        "schedule, the PEL rows one claim step reads"))
    max_deliveries: int = Field(5, ge=1, description=(
        "an entry delivered more often than this is dead-lettered"))
    consumer_prefix: str = Field("recovery", pattern=r"^[\w.:-]+$", description=(
        "the job's consumers are `<prefix>-<run id>-<part>`; each run registers its ID as "
        "`<prefix>:run:<run id>` (docs/GUARANTEES.md, \"Run IDs\")"))
    max_entries_per_s: float | None = Field(None, gt=0, description=(
        "cap on claimed entries per second across all partitions; none: no cap"))
    journal_prefix: str = Field("recovery:journal:", description=(
        "where a run on a master that may retry tasks journals its claim steps, so it can "
        "claim and hand over in one pass (docs/ACL.md: the recovery user's journal rule); "
        "`\"\"`: never, always materialise the claim first"))
    backoff_factor: float | None = Field(None, description=(
        "backoff by delivery count (README, \"Backoff by delivery count\"): an entry "
        "delivered k times is due once idle `min_idle_ms * backoff_factor^(k-1)` ms; none or "
        "1: every idle entry is due; at most 1000"))
    backoff_max_ms: int | None = Field(None, ge=1, description=(
        "the longest backoff wait (ms), at least `min_idle_ms`; none: no cap"))

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
