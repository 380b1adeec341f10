"""Group health as found before a run: per stream and group and per consumer.

Driver side (a few commands per unit): XLEN, XINFO GROUPS (pending, lag), XINFO CONSUMERS
(pending, idle, inactive). The PEL histograms come from an executor pass
(``recovery.survey.histogram_partition``) and are merged here by (stream, group).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

import redis

from recovery.config import RedisParams
from recovery.discovery import WorkUnit
from recovery.errors import StreamUnitError
from recovery.redis_conn import redis_errors
from recovery.scripts import delete_empty_consumer
from recovery.streams import consumer_info, group_info, stream_length

log = logging.getLogger(__name__)


def unit_health(client: redis.Redis, unit: WorkUnit, params: RedisParams) -> dict[str, Any]:
    """Length, lag, pending and consumers of one unit. Lag is None where the server cannot
    tell (before 7.0, or after deletions in the stream)."""
    with redis_errors(params, unit.stream, unit.group):
        group = next(g for g in group_info(client, unit.stream) if g["name"] == unit.group)
        consumers = [
            {"name": str(c["name"]), "pending": int(c["pending"]),  # type: ignore[call-overload]
             "idle_ms": int(c["idle"]),  # type: ignore[call-overload]
             "inactive_ms": _maybe_int(c.get("inactive"))}
            for c in consumer_info(client, unit.stream, unit.group)
        ]
        length = stream_length(client, unit.stream)
    return {"stream": unit.stream, "group": unit.group, "length": length,
            "lag": _maybe_int(group.get("lag")), "pending": int(group["pending"]),  # type: ignore[call-overload]
            "consumers": consumers}


def _maybe_int(value: object) -> int | None:
    return None if value is None else int(value)  # type: ignore[call-overload]


def collect_health(client: redis.Redis, units: Iterable[WorkUnit], params: RedisParams,
                   histograms: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Health of every unit (skipping units that vanished), histograms merged in."""
    by_unit = {(h["stream"], h["group"]): h for h in histograms}
    result = []
    for unit in units:
        try:
            row = unit_health(client, unit, params)
        except (StreamUnitError, StopIteration):
            continue
        hist = by_unit.get((unit.stream, unit.group), {})
        row["oldest_idle_ms"] = hist.get("oldest_idle_ms")
        row["deliveries"] = dict(hist.get("deliveries") or {})
        row["idle_ages"] = dict(hist.get("idle_ages") or {})
        result.append(row)
    return result


def remove_idle_consumers(client: redis.Redis, health: Iterable[dict[str, Any]],
                          idle_ms: int, params: RedisParams) -> list[str]:
    """Delete consumers idle longer than `idle_ms` that own nothing; never one that owns
    pending entries (the script re-checks atomically). Returns ``stream/group/name`` each."""
    removed = []
    for unit in health:
        for c in unit["consumers"]:
            if c["pending"] or c["idle_ms"] < idle_ms:
                continue
            with redis_errors(params, unit["stream"], unit["group"]):
                if delete_empty_consumer(client, unit["stream"], unit["group"], c["name"]):
                    removed.append(f"{unit['stream']}/{unit['group']}/{c['name']}")
    if removed:
        log.info("removed %d idle consumers with nothing pending: %s", len(removed),
                 ", ".join(removed[:20]))
    return removed


def format_health(health: list[dict[str, Any]]) -> str:
    """A compact per-unit health table for the log."""
    lines = ["stream / group: length, lag, pending, oldest idle s, deliveries, consumers"]
    for h in health:
        oldest = "-" if h["oldest_idle_ms"] is None else f"{h['oldest_idle_ms'] / 1000:.0f}"
        consumers = ", ".join(f"{c['name']}({c['pending']} pending, idle {c['idle_ms']} ms)"
                              for c in h["consumers"])
        lines.append(f"{h['stream']} / {h['group']}: {h['length']}, {h['lag']}, {h['pending']}, "
                     f"{oldest}, {h['deliveries']}, {consumers}")
    return "\n".join(lines)
