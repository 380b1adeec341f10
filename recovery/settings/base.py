"""The one base of every settings section: unknown keys refused, values frozen."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Section(BaseModel):
    """A ``[section]`` of the settings: a key it does not know is an error (a misspelt
    setting is never ignored), and a loaded value never changes."""

    model_config = ConfigDict(extra="forbid", frozen=True)
