"""A page of letters: newest or oldest first, from a cursor, filtered; never a whole stream.

Letters are read in chunks of XRANGE / XREVRANGE with COUNT between the filter's ID bounds
(its time window), from just past the cursor, each chunk also bounded by bytes
(:func:`recovery.redis_io.letters.bounded_page`). A chunk cut short by its bytes (huge
letters) ends the page there, with a cursor to go on from. Without a filter that looks inside
letters one chunk is the page. With one, chunks are read until the page is full or
``EXAMINE_BUDGET`` letters were looked at; the page then says how many it examined, and its
cursor continues from the last letter looked at, so the next page skips nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

import redis

from recovery.console.letters import Letter, LetterFilter
from recovery.redis_io.letters import bounded_page

PAGE_SIZE = 100
CHUNK = 200  # letters per read while a filter looks inside them (one script call)
EXAMINE_BUDGET = 20_000  # letters one page may look at before it answers


@dataclass(frozen=True)
class Page:
    """`letters` matching the filter, in the order asked; `cursor` the ID to continue after
    (None: nothing more in the window); `examined` letters looked at; `budget_spent` True when
    the page stopped at the budget before it was full."""

    letters: list[Letter]
    cursor: str | None
    examined: int
    budget_spent: bool


def read_page(client: redis.Redis, key: str, flt: LetterFilter, after: str | None,
              newest_first: bool, size: int = PAGE_SIZE,
              budget: int = EXAMINE_BUDGET) -> Page:
    """Up to `size` letters of `key` that match `flt`, continuing after the ID `after`
    (exclusive; None: from the start of the window in the order asked)."""
    low, high = flt.bounds()
    found: list[Letter] = []
    examined = 0
    while True:
        if after is not None:
            low, high = (low, f"({after}") if newest_first else (f"({after}", high)
        want = size - len(found) if not flt.narrows else min(CHUNK, budget - examined)
        entries, more = bounded_page(client, key, low, high, want, newest_first)
        for entry_id, flat in entries:
            examined += 1
            after = entry_id
            letter = Letter.of(entry_id, flat)
            if flt.matches(letter):
                found.append(letter)
                if len(found) == size:
                    return Page(found, entry_id, examined, False)
        if not more:
            return Page(found, None, examined, False)
        if len(entries) < want:  # cut by bytes: the next page goes on
            return Page(found, after, examined, True)
        if examined >= budget:
            return Page(found, after, examined, True)
