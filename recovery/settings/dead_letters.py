"""The ``[dead_letters]`` settings section: how ``jobs/dead_letters.py`` reads dead-letter
streams, and the warning thresholds both it and the recovery run check (validated on the
driver, part of ``recovery.settings.model.Settings``)."""

from __future__ import annotations

from pydantic import Field

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
    """

    page_size: int = Field(1000, ge=1, le=10_000)
    top_signatures: int = Field(10, ge=0, le=1000)
    write_entries: bool = False
    warn_length: int | None = Field(None, ge=1)
    warn_oldest_age_s: float | None = Field(None, gt=0)
