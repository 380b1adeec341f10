"""The state of the run's streams and groups right after the run, read on the driver for
the summary and the metrics: each group's pending entries and the job's own consumers still
holding some (XPENDING summary form), each distinct dead-letter stream's length (XLEN) and
its oldest dead letter's age (XRANGE - + COUNT 1: the time part of its first ID). Pipelined: a
round trip per 1000 commands. (The summary's ``health`` is the state as found before the
run; ``health_after`` this one.)"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from typing import Any, cast

import redis

from recovery.redis_io.commands import (
    StreamHead,
    head_commands,
    pending_summary_command,
    stream_heads,
)
from recovery.redis_io.dlq_names import DeadLetterNames, labels
from recovery.redis_io.round_trips import each
from recovery.redis_io.streams import shown
from recovery.report.summary import RunSummary
from recovery.rows import AfterRun, unit_key

log = logging.getLogger(__name__)


def read_after_run(client: redis.Redis, units: Iterable[tuple[str, str]],
                   names: DeadLetterNames, consumer_prefix: str = "recovery",
                   pairs: Iterable[tuple[str, str]] | None = None) -> AfterRun:
    """XPENDING <stream> <group> (summary form; reply ``[count, min id, max id, [[consumer,
    count], ...]]``) per unit, and XLEN and XRANGE - + COUNT 1 of each distinct dead-letter
    stream of `pairs` ((source stream, dead-letter stream); default: the units' by
    `names`), in pipelines."""
    units = list(dict.fromkeys(units))
    if pairs is None:
        pairs = ((stream, names.key(stream, group)) for stream, group in units)
    pairs = list(dict.fromkeys(pairs))
    label = labels(pairs)
    commands = [*(pending_summary_command(stream, group) for stream, group in units),
                *(c for key in label for c in head_commands(key))]
    now_ms = time.time() * 1000
    replies = each(client, commands)
    pending = dict(zip(units, replies[:len(units)], strict=True))
    heads = dict(zip(label, stream_heads(replies[len(units):]), strict=True))
    failed = {stream for stream, key in pairs if isinstance(heads[key], Exception)}
    read = {unit: reply for unit, reply in pending.items()
            if isinstance(reply, (list, tuple)) and reply}
    held = {unit: job_holdings(reply, consumer_prefix) for unit, reply in read.items()}
    return AfterRun(
        pending={unit: int(reply[0]) for unit, reply in read.items()},  # type: ignore[call-overload]
        dead_letters={label[key]: head.length for key, head in heads.items()
                      if isinstance(head, StreamHead)},
        dead_letter_ages={label[key]: age for key, head in heads.items()
                          if isinstance(head, StreamHead)
                          and (age := head.age_s(now_ms)) is not None},
        read_for=frozenset(stream for stream, _ in pairs) - failed,
        job_consumers={unit: n for unit, (n, _) in held.items()},
        job_consumer_entries={unit: n for unit, (_, n) in held.items()})


def job_holdings(summary: list[object] | tuple[object, ...], prefix: str) -> tuple[int, int]:
    """From an XPENDING summary reply: how many consumers named ``<prefix>-...`` (the job's
    own, any run's) hold entries, and how many entries they hold."""
    rows = cast(list[list[Any]], summary[3] if len(summary) > 3 and summary[3] else [])
    held = [int(count) for name, count in rows if shown(name).startswith(prefix + "-")]
    return len(held), sum(held)


def add_after_run(summary: RunSummary, client: redis.Redis, units: Iterable[tuple[str, str]],
                  names: DeadLetterNames, consumer_prefix: str = "recovery") -> None:
    """Read the state right after the run (:func:`read_after_run`) into `summary`: each unit
    row's ``pending_after``, the ``health_after`` headline and, for the metrics, ``after``.
    A read that fails (Redis gone meanwhile) leaves them unset and is logged: the run's
    outcome stands."""
    try:
        after = read_after_run(client, units, names, consumer_prefix)
    except redis.RedisError as exc:
        log.warning("run %s: the state after the run could not be read (%s)", summary.run_id,
                    type(exc).__name__)
        return
    summary.after = after
    summary.health_after = after_totals(after)
    summary.units = [u.with_pending_after(after.pending.get(unit_key(u)))
                     for u in summary.units]


def after_totals(after: AfterRun) -> dict[str, Any]:
    """The summary's ``health_after``: units read, their pending entries in all, and the
    entries of their dead-letter streams in all (a shared one counted once)."""
    return {"units": len(after.pending), "pending": sum(after.pending.values()),
            "dead_letter_length": sum(after.dead_letters.values())}
