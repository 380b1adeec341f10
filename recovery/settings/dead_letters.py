"""The ``[dead_letters]`` settings section: how ``jobs/dead_letters.py`` reads dead-letter
streams, the warning thresholds both it and the recovery run check, and the opt-in retention
it applies (validated on the driver, part of ``recovery.settings.model.Settings``)."""

from __future__ import annotations

from pydantic import Field, model_validator

from recovery.settings.base import Section


class DeadLettersSettings(Section):
    """Dead letters as data. The dead-letter streams are those of the streams that
    ``streams.keys`` / ``streams.match`` select, named by ``dead_letter.suffix`` or
    ``dead_letter.stream`` (a shared one read once).

    ``page_size``: entries per XRANGE reply; ``top_signatures``: error signatures in the
    JSON summary; ``write_entries``: also write every dead letter as Parquet (a second read of
    the streams). Warnings (off by default; never a cap, nothing is trimmed):
    ``warn_length`` when a dead-letter stream holds at least this many entries,
    ``warn_oldest_age_s`` when its oldest entry was added at least this many seconds ago.

    Retention (off by default; ``recovery.dead_letters.retention``): the dead-letter job
    trims each dead-letter stream (XTRIM MINID, exact) of letters added more than
    ``max_age_s`` seconds ago and of the oldest beyond the newest ``max_length``; no letter
    added less than ``retention_floor_s`` seconds ago is ever trimmed (a ``max_age_s`` below
    it is refused here; a ``max_length`` cut is held back to it, with a WARNING). Only
    letters of the selected sources go: the trim stops at the first entry, oldest first,
    that is not a letter or is a letter of a source not selected, never past it. With
    ``dry_run`` (``jobs/dead_letters.py --dry-run``) it only counts what it would trim.
    """

    page_size: int = Field(1000, ge=1, le=10_000)
    top_signatures: int = Field(10, ge=0, le=1000)
    write_entries: bool = False
    warn_length: int | None = Field(None, ge=1)
    warn_oldest_age_s: float | None = Field(None, gt=0)
    max_age_s: int | None = Field(None, ge=1)
    max_length: int | None = Field(None, ge=1)
    retention_floor_s: int | None = Field(None, ge=0)
    dry_run: bool = False

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
