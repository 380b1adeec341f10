"""Pages of dead letters by ID (recovery.console.browse.read_page): newest or oldest first,
each letter once across pages, a filter that stops at its read budget and says how far it
looked, a time window by ID. Against a real Redis."""

from __future__ import annotations

from recovery.console.browse import read_page
from recovery.console.letters import LetterFilter
from recovery.console.state import ConsoleState
from recovery.testing.local_redis import LocalServer
from tests.support.console_tools import DLQ, seed


def test_pages_go_by_id_and_filters_say_what_they_looked_at(state: ConsoleState,
                                                            redis_server: LocalServer) -> None:
    r = redis_server.client()
    ids = seed(r, "orders", [{b"n": str(i).encode()} for i in range(250)],
               reasons=["max-deliveries-exceeded"] * 249 + ["handler-failed-at-limit"])
    c = state.conn.client
    first = read_page(c, DLQ["orders"], LetterFilter(), None, newest_first=True)
    second = read_page(c, DLQ["orders"], LetterFilter(), first.cursor, newest_first=True)
    third = read_page(c, DLQ["orders"], LetterFilter(), second.cursor, newest_first=True)
    shown = [x.entry_id for p in (first, second, third) for x in p.letters]
    assert shown == ids[::-1] and third.cursor is None and first.examined == 100
    rare = LetterFilter(reason="handler-failed-at-limit")
    stopped = read_page(c, DLQ["orders"], rare, None, newest_first=False, budget=100)
    assert (stopped.letters, stopped.examined, stopped.budget_spent) == ([], 100, True)
    found = read_page(c, DLQ["orders"], rare, stopped.cursor, newest_first=False)
    assert [x.entry_id for x in found.letters] == [ids[-1]] and found.cursor is None
    ms = int(ids[10].split("-")[0])
    window = read_page(c, DLQ["orders"], LetterFilter(since_ms=ms, until_ms=ms), None, False)
    assert all(x.entry_id.startswith(f"{ms}-") for x in window.letters) and window.letters
