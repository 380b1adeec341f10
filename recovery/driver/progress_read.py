"""Progress readings from Redis, on the driver: each unit's PEL summary and the lengths of
the dead-letter streams, in one pipelined read (``recovery.driver.progress`` turns readings into
log lines)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

import redis

from recovery.driver.discovery import WorkUnit, is_job_consumer
from recovery.errors import DeadLetterNameError
from recovery.redis_io.dlq_names import dead_letter_key
from recovery.redis_io.redis_conn import server_text, unit_vanished
from recovery.redis_io.streams import each, shown


@dataclass(frozen=True)
class UnitState:
    """One unit as one reading saw it: `pending` entries in the group's PEL, `held` of them
    owned by this run's job consumers; `gone` when the stream or group no longer exists."""

    pending: int
    held: int
    gone: bool = False


GONE = UnitState(0, 0, gone=True)


@dataclass(frozen=True)
class Reading:
    """One pipelined read: a state per unit (None: that unit could not be read), the length
    of each dead-letter stream (None: unreadable), and one text per failed unit or key."""

    units: list[UnitState | None]
    dead: dict[str, int | None]
    errors: list[str]



def parse_pending_summary(reply: object, stem: str) -> UnitState:
    """A raw RESP2 ``XPENDING stream group`` reply, ``[total, first id, last id,
    [[consumer, count], ...] or nil]`` (counts as integers or digit strings), as a UnitState.
    Raises ValueError for any other shape."""
    try:
        total, _first, _last, rows = cast(Sequence[Any], reply)
        held = sum(int(count) for name, count in (rows or [])
                   if is_job_consumer(shown(name), stem))
        return UnitState(int(total), held)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"unexpected XPENDING reply {reply!r:.80}") from exc


def dead_letter_keys(units: Sequence[WorkUnit], suffix: str) -> list[str | None]:
    """The dead-letter stream of each unit's stream (None where it has no valid name)."""
    keys: list[str | None] = []
    for unit in units:
        try:
            keys.append(dead_letter_key(unit.stream, suffix))
        except DeadLetterNameError:
            keys.append(None)
    return keys


def read_progress(client: redis.Redis, units: Sequence[WorkUnit],
                  dlq_keys: Sequence[str | None], stem: str,
                  picked: Sequence[int] | None = None,
                  known: Mapping[tuple[str, str], object] | None = None) -> Reading:
    """XPENDING (summary) per unit and XLEN per distinct dead-letter key, pipelined with
    ``each`` (so per key's slot on a Redis Cluster). Per-command error replies become None
    (a unit whose stream or group vanished: ``GONE``) and an error text; a failure of the
    whole read (connection lost) raises redis-py's error. With `picked` (indices), only
    those units and their dead-letter keys are read; the others' states are None. `known`:
    summaries read elsewhere just before, by (stream, group) (raw ``XPENDING stream group``
    replies, or the error answered in their place: ``recovery.driver.discovery.CleanUp``);
    those units are not read again, except where the error says nothing about the unit
    (not a vanished stream or group)."""
    if picked is not None:
        part = read_progress(client, [units[i] for i in picked], [dlq_keys[i] for i in picked],
                             stem, known=known)
        spread: list[UnitState | None] = [None] * len(units)
        for i, state in zip(picked, part.units, strict=True):
            spread[i] = state
        return Reading(spread, part.dead, part.errors)
    summaries = {key: reply for key, reply in (known or {}).items() if _usable(reply)}
    unread = [u for u in units if (u.stream, u.group) not in summaries]
    dlqs = list(dict.fromkeys(k for k in dlq_keys if k))
    replies = each(client, [("XPENDING", u.stream, u.group) for u in unread]
                   + [("XLEN", key) for key in dlqs])
    summaries.update(zip([(u.stream, u.group) for u in unread], replies[:len(unread)],
                         strict=True))
    errors: list[str] = []
    states = [_unit_state(summaries[(unit.stream, unit.group)], stem,
                          f"{unit.stream} / {unit.group}", errors) for unit in units]
    dead: dict[str, int | None] = {}
    for key, reply in zip(dlqs, replies[len(unread):], strict=True):
        if isinstance(reply, int):
            dead[key] = reply
        else:
            dead[key] = None
            errors.append(f"{key}: {_reply_text(reply)}")
    return Reading(states, dead, errors)


def _usable(summary: object) -> bool:
    """A summary read elsewhere tells a unit's state: a reply, or its vanishing."""
    return not isinstance(summary, Exception) or unit_vanished(summary)


def health_reading(units: Sequence[WorkUnit], health: Sequence[dict[str, Any]],
                   dlq_keys: Sequence[str | None], stem: str) -> Reading:
    """The group health as found before a run (``recovery.driver.health`` rows: ``pending``,
    ``consumers`` with their ``pending``, ``dead_letter_length``) as a Reading, so the progress
    baseline costs no reads of its own. A unit without a health row (vanished since
    discovery) is None; a dead-letter length the health read could not see, None."""
    by_unit = {(h["stream"], h["group"]): h for h in health}
    states: list[UnitState | None] = []
    dead: dict[str, int | None] = {}
    for unit, key in zip(units, dlq_keys, strict=True):
        row = by_unit.get((unit.stream, unit.group))
        if row is None:
            states.append(None)
            continue
        held = sum(c["pending"] for c in row["consumers"] if is_job_consumer(c["name"], stem))
        states.append(UnitState(int(row["pending"]), held))
        if key:
            dead[key] = row["dead_letter_length"]
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
