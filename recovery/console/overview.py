"""The overview page's data: each dead-letter stream (length, oldest letter's age, read live),
the health of the source groups (pending, oldest pending idle time, consumers, read live), and
the counts of the latest background scan with how fresh they are."""

from __future__ import annotations

from dataclasses import dataclass

from recovery.console.counts import LetterCounts
from recovery.console.state import ConsoleState
from recovery.redis_io.letters import GroupHealth, group_health
from recovery.targets.dead_letter_streams import DeadLetterStream, now_ms


@dataclass(frozen=True)
class StreamRow:
    stream: DeadLetterStream
    oldest_age_s: float | None
    counts: LetterCounts | None


@dataclass(frozen=True)
class Overview:
    streams: list[StreamRow]
    groups: list[GroupHealth]


def overview(state: ConsoleState) -> Overview:
    """Read the overview now (pipelined: a few round trips however many streams). Starts a
    count scan of a stream that has none yet."""
    streams = state.streams()
    at = now_ms()
    rows = []
    for s in streams:
        counts = state.scans.latest(s.key)
        if counts is None and s.kind == "stream":
            counts = state.scans.start(s.key, s.length)
        rows.append(StreamRow(s, s.oldest_age_s(at), counts))
    sources = sorted({src for s in streams for src in s.sources})
    with state.conn.errors():
        groups = group_health(state.conn.client, sources)
    return Overview(rows, groups)
