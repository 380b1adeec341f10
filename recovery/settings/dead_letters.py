"""The ``[dead_letters]`` settings section: how ``jobs/dead_letters.py`` reads dead-letter
streams, the warning thresholds both it and the recovery run check, and the opt-in retention
it applies (validated on the driver, part of ``recovery.settings.model.Settings``)."""

from __future__ import annotations

from pydantic import Field, model_validator

from recovery.settings.base import Section


class DeadLettersSettings(Section):
    """Dead letters as data. The dead-letter streams are those of the streams that
    ``streams.keys`` / ``streams.match`` select, named by ``dead_letter.suffix`` or
    ``dead_letter.stream`` (a shared one read once). The warnings are never a cap; the
    retention (``recovery.dead_letters.retention``) is off unless ``max_age_s`` or
    ``max_length`` is set (each field's description)."""

    page_size: int = Field(1000, ge=1, le=10_000, description=(
        "`jobs/dead_letters.py`: entries per XRANGE reply"))
    top_signatures: int = Field(10, ge=0, le=1000, description=(
        "`jobs/dead_letters.py`: error signatures in its JSON summary"))
    write_entries: bool = Field(False, description=(
        "`jobs/dead_letters.py`: also write every dead letter as Parquet (a second read): "
        "[docs/OPERATIONS.md](docs/OPERATIONS.md#dead-letters-as-data)"))
    warn_length: int | None = Field(None, ge=1, description=(
        "warn when a dead-letter stream holds at least this many entries, in both jobs' "
        "summaries (`dead_letter_warnings`); never a cap, nothing is trimmed; none: off"))
    warn_oldest_age_s: float | None = Field(None, gt=0, description=(
        "warn when a dead-letter stream's oldest entry was added at least this many seconds "
        "ago, as `warn_length`; none: off"))
    max_age_s: int | None = Field(None, ge=1, description=(
        "opt-in retention: `jobs/dead_letters.py` trims, after its read (XTRIM MINID, exact), "
        "letters added more than this many seconds ago; only letters of the selected sources: "
        "the trim stops at the first entry (oldest first) that is not a letter or is a letter "
        "of a source not selected (a shared stream), never past it; none: off. "
        "[docs/OPERATIONS.md](docs/OPERATIONS.md#retention)"))
    max_length: int | None = Field(None, ge=1, description=(
        "opt-in retention, as `max_age_s`: the oldest letters beyond the newest `max_length` "
        "go; a cut into letters younger than `retention_floor_s` is held back to it, with a "
        "WARNING; none: off"))
    retention_floor_s: int | None = Field(None, ge=0, description=(
        "no letter added less than this many seconds ago is ever trimmed (a `max_age_s` below "
        "it is refused, exit 2); none: no floor"))
    dry_run: bool = Field(False, description=(
        "count what retention would trim, trim nothing (`jobs/dead_letters.py --dry-run` sets "
        "it)"))

    @model_validator(mode="after")
    def _age_above_floor(self) -> DeadLettersSettings:
        floor, age = self.retention_floor_s, self.max_age_s
        if floor is not None and age is not None and age < floor:
            raise ValueError(
                f"max_age_s ({age} s) is below dead_letters.retention_floor_s ({floor} s), so "
                "it would trim letters younger than the floor: raise max_age_s to at least "
                "the floor or lower the floor")
        return self

    @property
    def retention_on(self) -> bool:
        """Whether the dead-letter job trims (``max_age_s`` or ``max_length`` set)."""
        return self.max_age_s is not None or self.max_length is not None
