"""The state of the run's streams and groups right after the run, read on the driver for
the summary and the metrics: each group's pending entries (XPENDING summary form) and each
stream's dead-letter stream length (XLEN). Pipelined: a round trip per 1000 commands. (The
summary's ``health`` is the state as found before the run; ``health_after`` this one.)"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import redis

from recovery.redis_io.dlq_names import DeadLetterNames, labels
from recovery.redis_io.round_trips import each
from recovery.report.run_report import RunSummary

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class AfterRun:
    """`pending`: (stream, group) -> entries in its PEL; `dead_letters`: each dead-letter
    stream's length (0 when it does not exist), listed once under its source stream, or under
    its own name where several sources share it (``dlq_names.labels``); `read_for`: the
    source streams whose dead-letter streams were all read. A key whose read failed (the
    stream or group vanished, a permission missing) is absent."""

    pending: dict[tuple[str, str], int] = field(default_factory=dict)
    dead_letters: dict[str, int] = field(default_factory=dict)
    read_for: frozenset[str] = frozenset()


def read_after_run(client: redis.Redis, units: Iterable[tuple[str, str]],
                   names: DeadLetterNames) -> AfterRun:
    """XPENDING <stream> <group> (summary form; reply ``[count, min id, max id, consumers]``)
    per unit and XLEN of each distinct dead-letter stream of the units (`names`), in
    pipelines."""
    units = list(dict.fromkeys(units))
    pairs = list(dict.fromkeys((stream, names.key(stream, group)) for stream, group in units))
    label = labels(pairs)
    commands: list[tuple[object, ...]] = [
        *(("XPENDING", stream, group) for stream, group in units),
        *(("XLEN", key) for key in label)]
    replies = iter(each(client, commands))
    pending = {unit: next(replies) for unit in units}
    lengths = {key: next(replies) for key in label}
    failed = {stream for stream, key in pairs if isinstance(lengths[key], Exception)}
    return AfterRun(
        pending={unit: int(reply[0]) for unit, reply in pending.items()  # type: ignore[index]
                 if isinstance(reply, (list, tuple)) and reply},
        dead_letters={label[key]: int(reply) for key, reply in lengths.items()  # type: ignore[call-overload]
                      if not isinstance(reply, Exception)},
        read_for=frozenset(stream for stream, _ in pairs) - failed)


def add_after_run(summary: RunSummary, client: redis.Redis, units: Iterable[tuple[str, str]],
                  names: DeadLetterNames) -> None:
    """Read the state right after the run (:func:`read_after_run`) into `summary`: each unit
    row's ``pending_after``, the ``health_after`` headline and, for the metrics, ``after``.
    A read that fails (Redis gone meanwhile) leaves them unset and is logged: the run's
    outcome stands."""
    try:
        after = read_after_run(client, units, names)
    except redis.RedisError as exc:
        log.warning("run %s: the state after the run could not be read (%s)", summary.run_id,
                    type(exc).__name__)
        return
    summary.after = after
    summary.health_after = after_totals(after)
    for unit in summary.units:
        unit["pending_after"] = after.pending.get((unit["stream"], unit["group"]))


def after_totals(after: AfterRun) -> dict[str, Any]:
    """The summary's ``health_after``: units read, their pending entries in all, and the
    entries of their dead-letter streams in all (a shared one counted once)."""
    return {"units": len(after.pending), "pending": sum(after.pending.values()),
            "dead_letter_length": sum(after.dead_letters.values())}
