"""What a request asks for, parsed defensively: the dead-letter stream (only one of the
selection), letter IDs, the filter (time window as epoch ms or ISO 8601, UTC unless a zone
is given), the order and the cursor. A bad value is a ``BadQuery`` naming the parameter."""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import UTC, datetime

from recovery.console.letters import LetterFilter
from recovery.console.state import ConsoleState

ENTRY_ID = re.compile(r"^\d{1,20}-\d{1,20}$")
MAX_ID_PART = 2**64 - 1
MAX_SELECTED = 10_000
TEXT_LIMIT = 1000  # characters of a filter value


class BadQuery(ValueError):
    """A parameter the console cannot use (shown as a 400 page, with the fix)."""


class UnknownStream(LookupError):
    """A key that is no dead-letter stream of the selection (a 404: never read)."""


def stream_key(state: ConsoleState, params: Mapping[str, str]) -> str:
    """The ``key`` parameter, which must name a dead-letter stream of the selected streams."""
    key = params.get("key", "")
    if not key or not state.sources_of(key):
        raise UnknownStream(key)
    return key


def entry_id(text: str, name: str = "id") -> str:
    """A stream ID ``<ms>-<seq>``, each part at most 2**64 - 1 (Redis refuses more)."""
    if not ENTRY_ID.match(text) or any(int(p) > MAX_ID_PART for p in text.split("-")):
        raise BadQuery(f"{name} {text[:40]!r} is not a stream ID like 1700000000000-0")
    return text


def entry_ids(values: list[str]) -> list[str]:
    """Selected letter IDs (deduplicated, in the order given), each a stream ID."""
    if len(values) > MAX_SELECTED:
        raise BadQuery(f"{len(values)} letters selected: select at most {MAX_SELECTED}")
    return list(dict.fromkeys(entry_id(v, "selected ID") for v in values))


def moment_ms(text: str, name: str) -> int | None:
    """Epoch ms from epoch ms digits or an ISO 8601 time (``2026-12-02T07:00``; UTC unless
    it names a zone); None when empty."""
    text = text.strip()
    if not text:
        return None
    if text.isdigit() and len(text) <= 15:
        return int(text)
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise BadQuery(f"{name} {text[:40]!r} is no time: write 2026-12-02T07:00 (UTC) or "
                       "epoch milliseconds") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return max(0, int(moment.timestamp() * 1000))


def letter_filter(params: Mapping[str, str]) -> LetterFilter:
    """The filter of a browse request or a form."""
    text = {k: str(params.get(k, ""))[:TEXT_LIMIT]
            for k in ("source", "group", "reason", "signature")}
    since = moment_ms(str(params.get("since", "") or params.get("since_ms", "")), "since")
    until = moment_ms(str(params.get("until", "") or params.get("until_ms", "")), "until")
    if since is not None and until is not None and since > until:
        raise BadQuery("since is after until: swap them")
    return LetterFilter(text["source"], text["group"], text["reason"], text["signature"],
                        since, until)


def newest_first(params: Mapping[str, str]) -> bool:
    order = params.get("order", "newest")
    if order not in ("newest", "oldest"):
        raise BadQuery(f"order {order[:20]!r}: use newest or oldest")
    return order == "newest"


def cursor(params: Mapping[str, str]) -> str | None:
    after = params.get("after", "")
    return entry_id(after, "after") if after else None
