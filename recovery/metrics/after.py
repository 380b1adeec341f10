"""The state of the run's streams and groups right after the run, read on the driver for
the metrics: each group's pending entries (XPENDING summary form) and each stream's
dead-letter stream length (XLEN). Pipelined: a round trip per 1000 commands."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import redis

from recovery.redis_io.dlq_names import dead_letter_key
from recovery.redis_io.round_trips import each


@dataclass(frozen=True)
class AfterRun:
    """`pending`: (stream, group) -> entries in its PEL; `dead_letters`: stream -> its
    dead-letter stream's length (0 when it does not exist). A key whose read failed (the
    stream or group vanished, a permission missing) is absent."""

    pending: dict[tuple[str, str], int] = field(default_factory=dict)
    dead_letters: dict[str, int] = field(default_factory=dict)


def read_after_run(client: redis.Redis, units: Iterable[tuple[str, str]],
                   dlq_suffix: str) -> AfterRun:
    """XPENDING <stream> <group> (summary form; reply ``[count, min id, max id, consumers]``)
    per unit and XLEN of each stream's dead-letter stream, in pipelines."""
    units = list(dict.fromkeys(units))
    streams = list(dict.fromkeys(stream for stream, _ in units))
    commands: list[tuple[object, ...]] = [
        *(("XPENDING", stream, group) for stream, group in units),
        *(("XLEN", dead_letter_key(stream, dlq_suffix)) for stream in streams)]
    replies = iter(each(client, commands))
    pending = {unit: next(replies) for unit in units}
    lengths = {stream: next(replies) for stream in streams}
    return AfterRun(
        pending={unit: int(reply[0]) for unit, reply in pending.items()  # type: ignore[index]
                 if isinstance(reply, (list, tuple)) and reply},
        dead_letters={stream: int(reply) for stream, reply in lengths.items()  # type: ignore[call-overload]
                      if not isinstance(reply, Exception)})
