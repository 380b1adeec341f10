"""How the job words counts and lists of names in its log lines and tables."""

from __future__ import annotations

MAX_NAMES_IN_WARNING = 5


def some_names(names: list[str]) -> str:
    """The first ``MAX_NAMES_IN_WARNING`` names, then ``and N more``."""
    listed = ", ".join(names[:MAX_NAMES_IN_WARNING])
    more = len(names) - MAX_NAMES_IN_WARNING
    return listed + (f" and {more:,} more" if more > 0 else "")


def plural(count: int, word: str) -> str:
    """`word` with an "s" unless `count` is 1."""
    return word if count == 1 else word + "s"
