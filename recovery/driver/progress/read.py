"""Progress readings from Redis, on the driver: each unit's PEL summary, then the lengths of
the dead-letter streams that may have changed, in two pipelined reads
(``recovery.driver.progress.reporter`` turns readings into log lines)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import redis

from recovery.driver.discovery import WorkUnit
from recovery.errors import DeadLetterNameError
from recovery.params import is_job_consumer
from recovery.redis_io.commands import pending_summaries, stream_lengths
from recovery.redis_io.dlq_names import DeadLetterNames
from recovery.redis_io.error_codes import unit_vanished
from recovery.redis_io.redis_conn import server_text
from recovery.redis_io.streams import shown
from recovery.rows import HealthRow, unit_key


@dataclass(frozen=True)
class UnitState:
    """One unit as one reading saw it: `pending` entries in the group's PEL, `held` of them
    owned by this run's job consumers; `gone` when the stream or group no longer exists.
    `mark`: the whole PEL summary it was read from, (count, first ID, last ID, ((consumer,
    count), ...) sorted), None when it came from elsewhere (the group health); equal marks
    mean no entry left or entered the PEL in between (an entry delivered anew raises the last
    ID). Not part of equality."""

    pending: int
    held: int
    gone: bool = False
    mark: object = field(default=None, compare=False, repr=False)


GONE = UnitState(0, 0, gone=True, mark="gone")
LengthsFor = Callable[[Sequence["UnitState | None"]], Iterable[str]]


@dataclass(frozen=True)
class Reading:
    """One reading: a state per unit (None: that unit was not read, or could not be), the
    length of each dead-letter stream it read (None: unreadable), and one text per failed
    unit or key."""

    units: list[UnitState | None]
    dead: dict[str, int | None]
    errors: list[str]


def merged(first: Reading, then: Reading) -> Reading:
    """Two readings of the same units as one: each unit's and key's state from `then` where
    it read them, else from `first`; the errors of both."""
    units = [b if b is not None else a for a, b in zip(first.units, then.units, strict=True)]
    return Reading(units, {**first.dead, **then.dead}, first.errors + then.errors)


def parse_pending_summary(reply: object, stem: str) -> UnitState:
    """A raw RESP2 ``XPENDING stream group`` reply, ``[total, first id, last id,
    [[consumer, count], ...] or nil]`` (counts as integers or digit strings), as a UnitState.
    Raises ValueError for any other shape."""
    try:
        total, first, last, rows = cast(Sequence[Any], reply)
        counts = sorted((shown(name), int(count)) for name, count in (rows or []))
        held = sum(count for name, count in counts if is_job_consumer(name, stem))
        return UnitState(int(total), held,
                         mark=(int(total), _text(first), _text(last), tuple(counts)))
    except (TypeError, ValueError, AttributeError) as exc:
        raise ValueError(f"unexpected XPENDING reply {reply!r:.80}") from exc


def _text(entry_id: object) -> str | None:
    """An entry ID of a reply as text (None stays None)."""
    return None if entry_id is None else shown(cast(bytes | str, entry_id))


def dead_letter_keys(units: Sequence[WorkUnit], names: DeadLetterNames) -> list[str | None]:
    """The dead-letter stream of each unit (`names`; None where it has no valid name)."""
    keys: list[str | None] = []
    for unit in units:
        try:
            keys.append(names.key(unit.stream, unit.group))
        except DeadLetterNameError:
            keys.append(None)
    return keys


def units_by_key(dlq_keys: Sequence[str | None]) -> dict[str, list[int]]:
    """The indices of the units of each dead-letter key (the groups of one stream, or the
    streams of a shared name, share it)."""
    units_of: dict[str, list[int]] = {}
    for i, key in enumerate(dlq_keys):
        if key:
            units_of.setdefault(key, []).append(i)
    return units_of


def stale_lengths(keys: Iterable[str | None], units_of: Mapping[str, Sequence[int]],
                  marks: Sequence[object], read_with: Mapping[str, tuple[object, ...]],
                  lengths: Mapping[str, int | None]) -> list[str]:
    """Of `keys`, once each, the dead-letter keys whose last read length may no longer hold.
    A key's length holds when it was read (`lengths`) and each unit of its stream
    (`units_of`) has now (`marks`, by unit index, ``UnitState.mark``; None: unknown) the
    very mark it had when that length was read (`read_with`): the job moves entries to a
    dead-letter stream only out of those PELs, so none of this run's moves came since."""
    return [k for k in dict.fromkeys(k for k in keys if k)
            if lengths.get(k) is None or None in read_with.get(k, (None,))
            or read_with[k] != tuple(marks[i] for i in units_of[k])]


def read_progress(client: redis.Redis, units: Sequence[WorkUnit],
                  dlq_keys: Sequence[str | None], stem: str,
                  picked: Sequence[int] | None = None,
                  known: Mapping[tuple[str, str], object] | None = None,
                  lengths_for: LengthsFor | None = None) -> Reading:
    """XPENDING (summary) per unit, then XLEN per dead-letter key, each pipelined with
    ``each`` (so per key's slot on a Redis Cluster; a key's XLEN is sent after its units'
    XPENDING). Per-command error replies become None (a unit whose stream or group vanished:
    ``GONE``) and an error text; a failure of the whole read (connection lost) raises
    redis-py's error. With `picked` (indices), only those units are read; the others' states
    are None. `known`: summaries read elsewhere just before, by (stream, group) (raw
    ``XPENDING stream group`` replies, or the error answered in their place:
    ``recovery.driver.discovery.CleanUp``); those units are not read again, except where the
    error says nothing about the unit (not a vanished stream or group). `lengths_for`: given
    the states read (by index, None where not read), the dead-letter keys to read; by
    default every key of the units read. A key not read is absent from ``Reading.dead``."""
    indices = range(len(units)) if picked is None else picked
    summaries = {key: reply for key, reply in (known or {}).items() if _usable(reply)}
    unread = [units[i] for i in indices if (units[i].stream, units[i].group) not in summaries]
    replies = pending_summaries(client, [(u.stream, u.group) for u in unread])
    summaries.update(zip([(u.stream, u.group) for u in unread], replies, strict=True))
    errors: list[str] = []
    states: list[UnitState | None] = [None] * len(units)
    for i in indices:
        unit = units[i]
        states[i] = _unit_state(summaries[(unit.stream, unit.group)], stem,
                                f"{unit.stream} / {unit.group}", errors)
    wanted = lengths_for(states) if lengths_for else (dlq_keys[i] for i in indices)
    dlqs = list(dict.fromkeys(k for k in wanted if k))
    dead: dict[str, int | None] = {}
    for key, reply in zip(dlqs, stream_lengths(client, dlqs), strict=True):
        if isinstance(reply, int):
            dead[key] = reply
        else:
            dead[key] = None
            errors.append(f"{key}: {_reply_text(reply)}")
    return Reading(states, dead, errors)


def _usable(summary: object) -> bool:
    """A summary read elsewhere tells a unit's state: a reply, or its vanishing."""
    return not isinstance(summary, Exception) or unit_vanished(summary)


def health_reading(units: Sequence[WorkUnit], health: Sequence[HealthRow],
                   dlq_keys: Sequence[str | None], stem: str) -> Reading:
    """The group health as found before a run (``recovery.driver.health`` rows: ``pending``,
    ``consumers`` with their ``pending``, ``dead_letter_length``) as a Reading, so the progress
    baseline costs no reads of its own. A unit without a health row (vanished since
    discovery) is None; a dead-letter length the health read could not see, None."""
    by_unit = {unit_key(h): h for h in health}
    states: list[UnitState | None] = []
    dead: dict[str, int | None] = {}
    for unit, key in zip(units, dlq_keys, strict=True):
        row = by_unit.get((unit.stream, unit.group))
        if row is None:
            states.append(None)
            continue
        held = sum(c.pending for c in row.consumers if is_job_consumer(c.name, stem))
        states.append(UnitState(row.pending, held))
        if key:
            dead[key] = row.dead_letter_length
    return Reading(states, dead, [])


def _unit_state(reply: object, stem: str, name: str, errors: list[str]) -> UnitState | None:
    if isinstance(reply, Exception):
        if unit_vanished(reply):
            return GONE
        errors.append(f"{name}: {_reply_text(reply)}")
        return None
    try:
        return parse_pending_summary(reply, stem)
    except ValueError as exc:
        errors.append(f"{name}: {exc}")
        return None


def _reply_text(reply: object) -> str:
    return server_text(reply) if isinstance(reply, Exception) else f"unexpected reply {reply!r:.80}"
