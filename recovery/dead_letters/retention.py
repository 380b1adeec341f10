"""Opt-in retention of dead-letter streams (``dead_letters.max_age_s``, ``max_length``,
``retention_floor_s``), applied by the dead-letter job after its read, on the driver.

Per dead-letter stream with entries, one cut ID: every letter with a smaller ID goes, with
``XTRIM key MINID = <cut>`` (exact), so a letter added meanwhile (a greater ID) always stays.

- ``max_age_s``: the cut ``<now - max_age_s>-0``: a letter added more than ``max_age_s``
  seconds ago (its ID's time part, on the server's clock, TIME) goes.
- ``max_length``: the cut is the ID of the oldest of the newest ``max_length`` letters, found
  from the cheaper end (XRANGE over the letters to trim, or XREVRANGE over those to keep, in
  pages). Letters added later only keep more; one removed meanwhile (a redrive) may leave
  the stream a letter short of ``max_length``.
- The later of the two cuts applies (a letter past either limit goes). ``retention_floor_s``
  then holds it back to ``<now - floor>-0``: no letter younger than the floor is trimmed (the
  settings refuse a ``max_age_s`` below the floor; a length cut held back logs a WARNING and
  says so in the summary, ``held_by_floor``).

Only letters go, and only those of the selected sources: the entries below the cut are checked
oldest first and the trim stops at the first one that is not a letter (no metadata block: an
application stream a template pointed at) or is a letter of a source the run does not select
(a shared dead-letter stream): XTRIM cannot skip an entry, so that one and every newer entry
stay, a WARNING says so and the row names it (``stopped_at_id``, ``stopped_because``). A
stream with no letter at its start is never trimmed. Check and trim run in one script
(``lua/trim_letters.lua``, one key, ``page_size`` entries a step), so nothing unchecked goes;
a dry run walks the same steps without trimming and counts exactly what a real run takes.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import redis

from recovery.errors import RedisUnavailableError
from recovery.params import RedisParams
from recovery.redis_io.commands import stream_length
from recovery.redis_io.redis_conn import RedisConn
from recovery.redis_io.streams import stream_id_key
from recovery.redis_io.trim import (
    LetterScope,
    LetterTrim,
    LostTrimReply,
    TrimEnd,
    nth_id,
    server_time_ms,
    trim_letters,
)
from recovery.rows import TrimRow
from recovery.settings.dead_letters import DeadLettersSettings
from recovery.targets.dead_letter_streams import DeadLetterStream

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Cut:
    """Where one stream is trimmed: letters with an ID below `below` go; `by` names the
    limits that set it (``max_age_s``, ``max_length``); `held_by_floor` when
    ``retention_floor_s`` moved a length cut back."""

    below: str
    by: tuple[str, ...]
    held_by_floor: bool = False


def time_cut(now_ms: int, seconds: int) -> str:
    """The first ID of letters added at most `seconds` s before `now_ms` (epoch ms)."""
    return f"{max(0, now_ms - seconds * 1000)}-0"


def later(a: str, b: str) -> str:
    """The greater of two stream IDs."""
    return a if stream_id_key(a) >= stream_id_key(b) else b


def length_cut(client: redis.Redis, key: str, max_length: int, page: int) -> str | None:
    """The ID of the oldest of the newest `max_length` letters of `key`, read from the end
    where fewer entries are read; None when it holds at most `max_length` (XLEN first)."""
    excess = stream_length(client, key) - max_length
    if excess <= 0:
        return None
    if excess + 1 <= max_length:
        return nth_id(client, key, excess + 1, newest=False, page=page)
    return nth_id(client, key, max_length, newest=True, page=page)


def cut_of(client: redis.Redis, key: str, d: DeadLettersSettings, now_ms: int) -> Cut | None:
    """The cut of dead-letter stream `key` at `now_ms` (the server's clock), or None when no
    letter is past a limit by the cut IDs' reckoning."""
    cuts: dict[str, str] = {}
    if d.max_age_s is not None:
        cuts["max_age_s"] = time_cut(now_ms, d.max_age_s)
    if d.max_length is not None:
        found = length_cut(client, key, d.max_length, d.page_size)
        if found is not None:
            cuts["max_length"] = found
    if not cuts:
        return None
    below = next(iter(cuts.values()))
    for cut in cuts.values():
        below = later(below, cut)
    by = tuple(name for name, cut in cuts.items() if cut == below)
    if d.retention_floor_s is not None:
        floor = time_cut(now_ms, d.retention_floor_s)
        if later(below, floor) != floor:
            log.warning("dead-letter stream %s: its max_length cut (%s) would trim letters "
                        "younger than dead_letters.retention_floor_s (%s s): held back to %s",
                        key, below, d.retention_floor_s, floor)
            return Cut(floor, by, held_by_floor=True)
    return Cut(below, by)


def walk_letters(client: redis.Redis, s: DeadLetterStream, below: str,
                 d: DeadLettersSettings, progress: Callable[[int, str | None], None] | None = None,
                 groups: Sequence[str] = ()) -> tuple[int, str | None, LetterTrim]:
    """Trim (or, in a dry run, count) the letters of `s` below `below` that retention may
    take, one atomic script step of ``page_size`` entries at a time (``trim_letters``): the
    count, the newest one's ID and the last step (where and why it ended). After each step
    `progress` is told what went so far (the letters passed, the newest one's ID), so a
    later step that fails leaves the trims before it reported. No entry is below
    ``0-0`` (a limit reaching back before the epoch): nothing to walk, and XRANGE refuses an
    interval ending before it."""
    if stream_id_key(below) == (0, 0):
        return 0, None, LetterTrim(0, None, below, TrimEnd.CUT, None)
    start, passed, last = "-", 0, None
    while True:
        try:
            step = trim_letters(client, s.key, start, below, LetterScope(s.sources, groups),
                                d.page_size, d.dry_run)
        except LostTrimReply:
            raise RedisUnavailableError(
                f"the reply of a retention step on {s.key} was lost: Redis may have trimmed up "
                f"to {d.page_size} letters below {below} besides the {passed} reported: raise "
                "redis.socket_timeout_s or lower dead_letters.page_size") from None
        passed, last = passed + step.passed, step.last or last
        if progress is not None:
            progress(passed, last)
        if step.why != TrimEnd.MORE:
            return passed, last, step
        # A real step trimmed what it passed: the stream starts at its bound again.
        start = step.bound if d.dry_run else "-"


# The ends of a walk that stop short of the limits' cut, at an entry retention may not take.
STOPS = (TrimEnd.NOT_A_LETTER, TrimEnd.SOURCE_NOT_SELECTED, TrimEnd.GROUP_NOT_SELECTED)


def stop_message(row: TrimRow) -> str | None:
    """Where and why retention stopped short of the limits' cut on the stream of `row` (a
    :func:`trim_stream` row), for the log and the summary's ``warnings``; None: it did not."""
    if row.stopped_because is None:
        return None
    if row.stopped_because == TrimEnd.NOT_A_LETTER:
        why = ("an entry without the dead-letter metadata block (x-original-stream), not a "
               "letter: does dead_letter.stream name an application stream?")
    elif row.stopped_because == TrimEnd.GROUP_NOT_SELECTED:
        group = row.stopped_source
        why = (f"a letter of group {group or '(none)'}, not in streams.groups: the letters of "
               "groups the run does not select are not its to trim")
    else:
        source = row.stopped_source
        why = (f"a letter of {source}, a stream not selected: a shared dead-letter stream is "
               "trimmed only up to the first letter of a source the run does not select "
               f"(select {source} too to trim further)")
    return (f"dead-letter stream {row.dead_letter_stream} (of {row.stream}): retention "
            f"stopped at {row.stopped_at_id}, {why}; it and every newer entry stay")


def retention_warnings(retention: dict[str, Any] | None) -> list[str]:
    """One warning per stream where retention stopped short (none when it is off)."""
    rows: list[TrimRow] = retention["streams"] if retention else []
    return [m for m in map(stop_message, rows) if m is not None]


def trim_stream(client: redis.Redis, s: DeadLetterStream, d: DeadLettersSettings,
                now_ms: int, rows: list[TrimRow] | None = None,
                groups: Sequence[str] = ()) -> TrimRow:
    """Trim one dead-letter stream (in a dry run, ``d.dry_run``, count what would go and
    trim nothing); its summary row. Only letters of `groups` (``streams.groups``; empty: all)
    are trimmed. The row is added to `rows` before any trim and kept up to date step by step
    (a failure midway leaves what went in it)."""
    at = len(rows) if rows is not None else None
    row = TrimRow(s.source, s.key)

    def put(**changes: Any) -> None:
        nonlocal row
        row = replace(row, **changes)
        if rows is not None and at is not None:
            rows[at] = row

    if rows is not None:
        rows.append(row)
    cut = cut_of(client, s.key, d, now_ms)
    if cut is None:
        return row
    put(by=list(cut.by), held_by_floor=cut.held_by_floor)
    passed, last, step = walk_letters(
        client, s, cut.below, d, lambda went, newest: put(
            would_trim=went, last_trimmed_id=newest, trimmed=0 if d.dry_run else went),
        groups)
    put(kept_from_id=step.bound)
    if step.why in STOPS:
        put(stopped_at_id=step.bound, stopped_because=step.why, stopped_source=step.source)
        log.warning("%s", stop_message(row))
    if d.dry_run and passed:
        log.info("dead-letter stream %s (of %s): a dry run, would trim %d letters, up to %s",
                 s.key, s.source, passed, last)
    elif passed:
        log.info("dead-letter stream %s (of %s): trimmed %d letters, up to %s (%s)", s.key,
                 s.source, passed, last, ", ".join(cut.by))
    return row


def apply_retention(params: RedisParams, streams: list[DeadLetterStream],
                    d: DeadLettersSettings,
                    failed: Callable[[dict[str, Any]], None] | None = None,
                    groups: Sequence[str] = ()) -> dict[str, Any] | None:
    """Trim every dead-letter stream that holds entries (``status`` ``read``) when retention
    is on; the summary's ``retention``: the limits, ``now_ms`` (the server's clock the ages
    count from), ``dry_run``, ``trimmed`` (total letters), ``would_trim`` (what a real run
    trims: ``trimmed`` itself, or in a dry run the letters it would trim), ``trimmed_streams``
    (streams trimmed), ``stopped_streams`` (streams where retention stopped short of the
    cut at an entry it may not trim) and ``streams`` (one row per stream looked at,
    :func:`trim_stream`).
    None when retention is off (nothing is sent). When a step fails, `failed` is given the
    report of what was trimmed until then before the error goes on (the run fails, and its
    summary still says which letters are gone)."""
    if not d.retention_on:
        return None
    rows: list[TrimRow] = []
    now_ms: int | None = None
    conn = RedisConn.open(params)
    try:
        with conn.errors():
            now_ms = server_time_ms(conn.client)
            for s in streams:
                if s.status == "read":
                    trim_stream(conn.client, s, d, now_ms, rows, groups)
    except Exception:
        if failed is not None:
            failed(retention_report(d, now_ms, rows))
        raise
    finally:
        conn.close()
    return retention_report(d, now_ms, rows)


def retention_report(d: DeadLettersSettings, now_ms: int | None, rows: list[TrimRow]
                     ) -> dict[str, Any]:
    """The summary's ``retention`` of the rows of :func:`trim_stream` (see
    :func:`apply_retention`)."""
    return {"max_age_s": d.max_age_s, "max_length": d.max_length,
            "retention_floor_s": d.retention_floor_s, "now_ms": now_ms, "dry_run": d.dry_run,
            "trimmed": sum(r.trimmed for r in rows),
            "would_trim": sum(r.would_trim for r in rows),
            "trimmed_streams": sum(1 for r in rows if r.trimmed),
            "stopped_streams": sum(1 for r in rows if r.stopped_because), "streams": rows}
