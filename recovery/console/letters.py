"""A dead letter as the console shows it, and the filters it is browsed by. Pure: no I/O.

A letter's flat fields are split as the dead-letter reader splits them
(:func:`recovery.dead_letters.read.split_fields`): the original fields, then the metadata
block from the last ``x-original-stream`` on. Values are shown as UTF-8 text where they are
valid UTF-8, else as hex; a value longer than ``SHOWN_BYTES`` is cut, with its size shown.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from recovery.dead_letters.read import split_fields
from recovery.report.signature_rules import signature_text

# Messages repeat (a thousand failures of one cause): each distinct one is worked out once.
_signature = functools.lru_cache(maxsize=65_536)(signature_text)
SHOWN_BYTES = 2048  # bytes of a value shown in full on a letter's page
LISTED_BYTES = 80  # bytes of a value shown in a list of letters
SOURCE = b"x-original-stream"
GROUP = b"x-original-group"
REASON = b"x-death-reason"
MESSAGE = b"x-exception-message"


@dataclass(frozen=True)
class ShownValue:
    """A field name or value for a page: `text` (UTF-8, or hex when `is_hex`), cut to a
    prefix when `cut`; `size` its length in bytes."""

    text: str
    size: int
    is_hex: bool
    cut: bool


def shown_value(value: bytes, limit: int = SHOWN_BYTES) -> ShownValue:
    """`value` as UTF-8 text where it is valid UTF-8, else as hex; at most `limit` bytes of
    it (a cut never splits a UTF-8 character)."""
    head = value[:limit]
    try:
        text = value.decode("utf-8")
        is_hex = False
        if len(value) > limit:
            text = head.decode("utf-8", "ignore")
    except UnicodeDecodeError:
        text, is_hex = head.hex(" "), True
    return ShownValue(text, len(value), is_hex, len(value) > limit)


@dataclass(frozen=True)
class Letter:
    """One dead letter: its ID in the dead-letter stream, its original fields and its metadata
    block (name -> first value; empty for an entry written by something else)."""

    entry_id: str
    originals: list[tuple[bytes, bytes]]
    block: dict[bytes, bytes]

    @classmethod
    def of(cls, entry_id: str, flat: Sequence[bytes]) -> Letter:
        originals, block = split_fields(flat)
        return cls(entry_id, originals, block)

    def meta(self, name: bytes) -> str | None:
        """A metadata field as text (invalid UTF-8 as ``\\xNN``), None when absent."""
        value = self.block.get(name)
        return None if value is None else value.decode("utf-8", "backslashreplace")

    @property
    def source(self) -> str | None:
        return self.meta(SOURCE)

    @property
    def group(self) -> str | None:
        return self.meta(GROUP)

    @property
    def reason(self) -> str | None:
        return self.meta(REASON)

    @property
    def message(self) -> str | None:
        """The handler's last error (``x-exception-message``), None when absent."""
        return self.meta(MESSAGE)

    @property
    def signature(self) -> str | None:
        return _signature(self.message)

    @property
    def dead_lettered_at(self) -> datetime:
        """When it was dead-lettered: the time part of its ID (UTC)."""
        return datetime.fromtimestamp(int(self.entry_id.partition("-")[0]) / 1000, tz=UTC)

    def shown_fields(self, limit: int = SHOWN_BYTES) -> list[tuple[ShownValue, ShownValue]]:
        return [(shown_value(n, limit), shown_value(v, limit)) for n, v in self.originals]

    def shown_block(self, limit: int = SHOWN_BYTES) -> list[tuple[ShownValue, ShownValue]]:
        return [(shown_value(n, limit), shown_value(v, limit)) for n, v in self.block.items()]

    def as_json_record(self, stream: str) -> dict[str, object]:
        """The letter for an export line: fields as [name, value] pairs, each value a string
        where it is UTF-8, else ``{"hex": "..."}``; metadata likewise, as an object."""
        return {"dead_letter_stream": stream, "id": self.entry_id,
                "fields": [[_json_value(n), _json_value(v)] for n, v in self.originals],
                "metadata": {n.decode("utf-8", "backslashreplace"): _json_value(v)
                             for n, v in self.block.items()}}


def _json_value(value: bytes) -> object:
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        return {"hex": value.hex()}


@dataclass(frozen=True)
class LetterFilter:
    """Which letters a page lists: each non-empty criterion must hold (exact match of the
    metadata field; `signature` of the exception message). `since_ms` / `until_ms` bound the
    time part of the dead-letter ID (epoch ms, inclusive)."""

    source: str = ""
    group: str = ""
    reason: str = ""
    signature: str = ""
    since_ms: int | None = None
    until_ms: int | None = None

    @property
    def narrows(self) -> bool:
        """Whether any criterion beyond the ID range applies (letters must be looked at)."""
        return bool(self.source or self.group or self.reason or self.signature)

    def matches(self, letter: Letter) -> bool:
        return ((not self.source or letter.source == self.source)
                and (not self.group or letter.group == self.group)
                and (not self.reason or letter.reason == self.reason)
                and (not self.signature or letter.signature == self.signature))

    def bounds(self) -> tuple[str, str]:
        """XRANGE bounds of the time window: (low, high), ``-`` / ``+`` where open."""
        low = "-" if self.since_ms is None else f"{self.since_ms}-0"
        high = "+" if self.until_ms is None else f"{self.until_ms}-{2**64 - 1}"
        return low, high

    def query(self) -> dict[str, str]:
        """The filter as query parameters (empty ones left out)."""
        found = {"source": self.source, "group": self.group, "reason": self.reason,
                 "signature": self.signature,
                 "since_ms": "" if self.since_ms is None else str(self.since_ms),
                 "until_ms": "" if self.until_ms is None else str(self.until_ms)}
        return {k: v for k, v in found.items() if v}
