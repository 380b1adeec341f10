"""Group health as found before a run: per stream and group and per consumer.

Driver side (one or a few commands per unit): discovery's read per stream (``XINFO STREAM ..
FULL``: its length, and per group pending, lag and consumers with their pending, idle and
inactive times; or, where that read is not possible, discovery's XINFO GROUPS, then here XINFO
CONSUMERS per unit and the stream's XLEN), and per stream the XLEN of its dead-letter stream.
The PEL histograms come from the executors and are merged here by (stream, group): in a run
from the claim steps' own reads (``recovery.executor.claim.loop``), in a dry run from a pass of
their own (``recovery.executor.survey.histogram_partition``).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterable
from typing import Any

from recovery.driver.discovery import CleanUp, WorkUnit, clean_up_consumers
from recovery.errors import DeadLetterNameError
from recovery.redis_io.commands import consumers_command, length_command
from recovery.redis_io.dlq_names import DeadLetterNames
from recovery.redis_io.key_holds import count_command as hold_count_command
from recovery.redis_io.key_holds import hold_key
from recovery.redis_io.redis_conn import RedisConn
from recovery.redis_io.round_trips import each
from recovery.redis_io.streams import info_rows, shown
from recovery.report.summary import largest, unlisted_line
from recovery.rows import ConsumerHealth, HealthRow, HistogramRow, unit_key

log = logging.getLogger(__name__)


def _health_row(unit: WorkUnit, consumers: list[dict[str, object]], length: Any,
                dead_letters: Any, held: Any) -> HealthRow:
    """One unit's health: pending and lag as discovery read them (just before), its
    consumers (XINFO CONSUMERS rows), the stream's and its dead letters' lengths from their
    raw replies (the dead-letter XLEN may be an error: null), its held keys' HLEN reply (not
    an integer: null). Lag is None where the server cannot tell (before 7.0, or after
    deletions in the stream)."""
    return HealthRow(
        unit.stream, unit.group, int(length), unit.lag, unit.pending,
        tuple(ConsumerHealth(shown(c["name"]), int(c["pending"]),  # type: ignore[arg-type, call-overload]
                             int(c["idle"]),  # type: ignore[call-overload]
                             _maybe_int(c.get("inactive")))
              for c in consumers),
        None if isinstance(dead_letters, Exception) else int(dead_letters),
        held if isinstance(held, int) else None)


def _maybe_int(value: object) -> int | None:
    return None if value is None else int(value)  # type: ignore[call-overload]


def collect_health(conn: RedisConn, units: Iterable[WorkUnit], names: DeadLetterNames,
                   hold_prefix: str | None = None) -> list[HealthRow]:
    """Health of every unit (skipping units that vanished), histograms still empty. Units
    come from discovery, so their dead-letter names exist (``dlq_names``).

    Pipelined (``each``, a round trip per 1000 commands): the XLEN of each unit's
    dead-letter stream (`names`), once per name (the groups of a stream, or the streams of
    a shared name, share it; each of their rows shows that stream's whole length). A unit that
    discovery's FULL read showed (``WorkUnit.seen``) costs nothing more; for the others
    (``--plan``, a Redis Cluster, a user that may not run XINFO STREAM) XINFO CONSUMERS per
    unit and the stream's XLEN once per stream. With `hold_prefix` (per-key order where
    dead-lettered heads hold their keys), ``held_keys``: the HLEN of each unit's hash of
    held keys (``recovery.redis_io.key_holds``), in the same pipeline."""
    units = list(units)
    unseen = [u for u in units if u.seen is None]
    unseen_streams = list(dict.fromkeys(u.stream for u in unseen))
    dlq_of = {(u.stream, u.group): names.key(u.stream, u.group) for u in units}
    dlqs = list(dict.fromkeys(dlq_of.values()))
    commands = [*(consumers_command(u.stream, u.group) for u in unseen),
                *(length_command(s) for s in unseen_streams),
                *(length_command(key) for key in dlqs)]
    holds = _hold_names(units, hold_prefix)
    commands += [hold_count_command(name) for name in holds.values()]
    with conn.errors():
        replies = iter(each(conn.client, commands))
    consumers = {(u.stream, u.group): next(replies) for u in unseen}
    lengths = {s: next(replies) for s in unseen_streams}
    dead_letters = {key: next(replies) for key in dlqs}
    held = {unit: next(replies) for unit in holds}
    result = []
    for unit in units:
        rows: list[dict[str, object]]
        length: object
        if unit.seen is not None:
            rows, length = unit.seen.consumers, unit.seen.length
        else:
            raw, length = consumers[(unit.stream, unit.group)], lengths[unit.stream]
            if isinstance(raw, Exception) or isinstance(length, Exception):
                continue  # vanished since discovery: the run reports it
            rows = info_rows(raw)  # type: ignore[arg-type]
        key = (unit.stream, unit.group)
        result.append(_health_row(unit, rows, length, dead_letters[dlq_of[key]], held.get(key)))
    return result


def _hold_names(units: list[WorkUnit], prefix: str | None) -> dict[tuple[str, str], str]:
    """(stream, group) -> its hash of held keys, where `prefix` is given and the stream's
    name allows one (``recovery.redis_io.key_holds.hold_key``)."""
    names: dict[tuple[str, str], str] = {}
    for u in units if prefix is not None else []:
        with contextlib.suppress(DeadLetterNameError):
            names[(u.stream, u.group)] = hold_key(prefix, u.stream, u.group)  # type: ignore[arg-type]
    return names


def add_histograms(health: list[HealthRow], histograms: Iterable[HistogramRow]
                   ) -> list[HealthRow]:
    """The health rows with the histogram rows merged in by (stream, group); a unit without
    one gets empty histograms."""
    by_unit = {unit_key(h): h for h in histograms}
    return [row.with_histogram(by_unit.get(unit_key(row))) for row in health]


def remove_idle_consumers(conn: RedisConn, health: Iterable[HealthRow], idle_ms: int
                          ) -> int:
    """Delete consumers idle longer than `idle_ms` that own nothing; never one that owns
    pending entries (the script re-checks atomically), nor one whose name shows a ``\\x``
    escape (it may stand for bytes that are not UTF-8, see ``shown``). Returns how many were
    deleted."""
    targets = [(h.stream, h.group, c.name) for h in health for c in h.consumers
               if not c.pending and c.idle_ms >= idle_ms and "\\x" not in c.name]
    removed = clean_up_consumers(conn, targets).removed
    if removed:
        log.info("removed %d idle consumers with nothing pending", removed)
    return removed


def clean_up_job_consumers(conn: RedisConn, health: Iterable[HealthRow],
                           own: Iterable[tuple[str, str, str]], prefix: str) -> CleanUp:
    """Delete the job's own consumers that own nothing once the run is done: this run's
    (`own`: (stream, group, consumer) triples) and earlier runs' (``<prefix>-...``, as the
    group health found them). Consumers of the application are never touched, and a
    consumer that still owns pending entries is never deleted (the script checks
    atomically). No XINFO CONSUMERS of its own: pipelined script calls only, one PEL
    summary read per (stream, group). Returns how many were deleted and, per (stream,
    group) of `own` and of the health, its PEL summary as read just before the deletions
    (``recovery.driver.discovery.CleanUp``: the final progress reading uses them)."""
    targets = dict.fromkeys(own)
    for h in health:
        targets.update(dict.fromkeys((h.stream, h.group, c.name) for c in h.consumers
                                     if c.name.startswith(prefix + "-") and "\\x" not in c.name))
    return clean_up_consumers(conn, list(targets))


def format_health(health: list[HealthRow], max_units: int = 0) -> str:
    """A compact per-unit health table for the log: one line per unit, deliveries as
    ``<delivery count bucket>:<entries>`` pairs, consumers with their pending entries and
    idle time. With `max_units` above 0, at most that many units are listed (those with the
    most pending entries) and one line counts the others."""
    lines = ["stream / group: length, lag, pending, oldest idle s, deliveries, consumers"
             "[, held keys]"]
    listed, unlisted = largest(health, max_units, lambda h: h.pending)
    for h in listed:
        oldest = "-" if h.oldest_idle_ms is None else f"{h.oldest_idle_ms / 1000:.0f}"
        deliveries = " ".join(f"{label}:{n}" for label, n in h.deliveries) or "-"
        consumers = ", ".join(f"{c.name}({c.pending} pending, idle {c.idle_ms} ms)"
                              for c in h.consumers)
        lag = "unknown" if h.lag is None else h.lag  # before 7.0, or after deletions
        held = "" if h.held_keys is None else f", held keys {h.held_keys}"
        lines.append(f"{h.stream} / {h.group}: {h.length}, {lag}, {h.pending}, "
                     f"{oldest}, {deliveries}, {consumers}{held}")
    if unlisted:
        lines.append(unlisted_line(unlisted, "the group health files"))
    return "\n".join(lines)
