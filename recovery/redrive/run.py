"""A redrive, orchestrated on the driver: dead letters go back to their source streams.

Why no Spark stage: the work is one server-side script per batch (``lua/redrive.lua``) that
reads, filters and moves entries inside Redis, so no message crosses the network and there is
nothing for executors to share; a dead-letter stream is one key on one shard, where scripts run
one at a time anyway; and a global ``limit`` and rate cap are exact in one sequential loop.
``jobs/redrive.py`` is still a spark-submit entry point, like every job of the package.

Each redriven entry is appended to its source stream with a new ID (XADD ``*``), not made
pending for any group: every consumer group of the source reads it with ``XREADGROUP >``,
as for any new message. Re-running is always safe: an entry leaves the dead-letter stream only
in the script call that re-adds it, so a killed redrive leaves each entry in exactly one place.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta

from recovery.errors import ConfigError, StreamUnitError
from recovery.executor.claim.throttle import Throttle
from recovery.redis_io.commands import stream_length
from recovery.redis_io.dlq_names import refuse_cross_slot
from recovery.redis_io.redis_conn import RedisConn
from recovery.redis_io.redrive import RedriveFilter, redrive_step
from recovery.redis_io.streams import key_type
from recovery.redrive.report import RedriveSummary
from recovery.rows import RedriveUnit, Skipped
from recovery.settings.model import Settings, executor_params
from recovery.settings.redrive import RedriveSettings
from recovery.targets.dead_letter_streams import name_pairs
from recovery.targets.keys import check_server, sources_by_content

log = logging.getLogger(__name__)
EXAMINE_PER_MOVE = 10  # entries one script call may examine per entry it may move
MAX_EXAMINE = 10_000  # bound on one call's work, so the script never blocks Redis for long
MAX_SEQ = 2**64 - 1
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass
class _Budget:
    """The limit and rate cap shared by every stream of one redrive."""

    batch_size: int
    limit: int | None
    throttle: Throttle
    rate: float | None
    matched: int = 0

    def moves_for_next_call(self) -> int:
        """How many entries the next call may move (>= 1 unless the limit is reached)."""
        n = self.batch_size
        if self.rate is not None:  # small calls keep a slow rate smooth
            n = min(n, max(1, math.floor(self.rate)))
        if self.limit is not None:
            n = min(n, self.limit - self.matched)
        return n

    def spend(self, n: int) -> None:
        self.matched += n
        self.throttle.take(n)


def id_range(r: RedriveSettings) -> tuple[str, str]:
    """XRANGE bounds over dead-letter IDs from from_id/to_id and since/until (intersected).

    Raises ConfigError when the range is empty.
    """
    starts = [r.from_id] + ([str(_epoch_ms(r.since))] if r.since else [])
    ends = [r.to_id] + ([str(_epoch_ms(r.until))] if r.until else [])
    start = max(starts, key=lambda b: _bound_key(b, is_end=False))
    end = min(ends, key=lambda b: _bound_key(b, is_end=True))
    if _bound_key(start, is_end=False) > _bound_key(end, is_end=True):
        raise ConfigError(
            f"redrive range is empty (from {start} to {end}): check redrive.from_id, "
            "redrive.to_id, redrive.since and redrive.until"
        )
    return start, end


def _epoch_ms(moment: datetime) -> int:
    """Milliseconds since the epoch, floored exactly (no float rounding)."""
    return (moment - EPOCH) // timedelta(milliseconds=1)


def _bound_key(bound: str, is_end: bool) -> tuple[int, int]:
    """Sort key of an XRANGE bound; a bare ``ms`` means seq 0 as a start, max as an end."""
    if bound == "-":
        return (0, 0)
    if bound == "+":
        return (MAX_SEQ, MAX_SEQ)
    ms, _, seq = bound.partition("-")
    return (int(ms), int(seq) if seq else (MAX_SEQ if is_end else 0))


def select_units(conn: RedisConn, settings: Settings
                 ) -> tuple[list[RedriveFilter], list[Skipped]]:
    """Source streams to redrive into, each with its dead-letter stream and filters.

    Explicit ``streams.keys`` count even if the source or its dead-letter stream is gone
    (XADD re-creates the source); ``streams.match`` finds existing keys that have a
    dead-letter stream. A dead-letter key of another type is skipped with a reason. A
    shared dead-letter stream gives a filter per source: each takes only the letters whose
    ``x-original-stream`` names its source. On a Redis Cluster, a dead-letter name outside
    its source's slot refuses the redrive (DeadLetterNameError, exit 2) before any move.
    """
    r, names = settings.redrive, settings.dead_letter.names
    skipped: list[Skipped] = []
    units: list[RedriveFilter] = []
    selected = sources_by_content(conn, settings, skipped)
    pairs = name_pairs(conn, names, list(selected), skipped, r.groups)
    refuse_cross_slot(conn.client, names, pairs)
    for name, dlq in pairs:
        explicit = selected[name]
        with conn.errors():
            kind = key_type(conn.client, dlq)
        if kind not in ("stream", "none"):
            skipped.append(Skipped(name, None, f"{dlq} is a {kind}, not a stream: left alone"))
        elif kind == "stream" or explicit:
            units.append(RedriveFilter(name, dlq, tuple(r.groups), tuple(r.reasons)))
    return units, skipped


def run_redrive(settings: Settings, summary: RedriveSummary) -> RedriveSummary:
    """One redrive (or dry run, per ``redrive.dry_run``), filling `summary` as it goes, so a
    failure still shows what was done. Raises RecoveryError subclasses."""
    started = time.monotonic()
    r = settings.redrive
    summary.dry_run = r.dry_run
    start, end = id_range(r)
    params = executor_params(settings, summary.run_id).redis
    budget = _Budget(r.batch_size, r.limit, Throttle(r.max_entries_per_s), r.max_entries_per_s)
    conn = RedisConn.open(params)
    try:
        check_server(conn)
        units, skipped = select_units(conn, settings)
        summary.skipped = list(skipped)
        for flt in units:
            if budget.moves_for_next_call() <= 0:
                break
            _redrive_one(conn, flt, (start, end), budget, summary)
    finally:
        conn.close()
        summary.duration_s = round(time.monotonic() - started, 3)
    if summary.skipped and summary.status == "ok":
        summary.status = "partial"
    return summary


def _redrive_one(conn: RedisConn, flt: RedriveFilter,
                 bounds: tuple[str, str], budget: _Budget, summary: RedriveSummary) -> None:
    """Walk one dead-letter stream with script calls until the range or the budget ends."""
    unit = RedriveUnit(flt.source, flt.dead_letter_stream)
    start, end = bounds
    try:
        while (moves := budget.moves_for_next_call()) > 0:
            with conn.errors(flt.source):
                step = redrive_step(conn.client, flt, start, end,
                                    min(MAX_EXAMINE, moves * EXAMINE_PER_MOVE), moves,
                                    summary.dry_run)
            unit = replace(unit, examined=unit.examined + step.examined,
                           matched=unit.matched + len(step.moved),
                           redriven=unit.redriven + (0 if summary.dry_run else len(step.moved)))
            log.debug("redrive %s: %s", flt.source, step.moved)
            if step.retried and not summary.dry_run:
                _uncounted(summary, flt, moves)
            budget.spend(len(step.moved))
            if step.cursor is None:
                break
            start = "(" + step.cursor
    except StreamUnitError as exc:
        summary.skipped.append(Skipped(flt.source, None, str(exc)))
    except BaseException:  # Redis gone, Ctrl-C: the summary still shows what was moved
        summary.add_unit(unit)  # left_in_dead_letter None (a call whose reply was
        raise  # cut off is not counted: its letters may have moved too)
    with conn.errors(flt.dead_letter_stream):
        unit = replace(unit, left_in_dead_letter=stream_length(conn.client,
                                                               flt.dead_letter_stream))
    log.info("redrive %s <- %s: %d matched, %d redriven, %d examined%s", flt.source,
             flt.dead_letter_stream, unit.matched, unit.redriven, unit.examined,
             " (dry run)" if summary.dry_run else "")
    summary.add_unit(unit)


def _uncounted(summary: RedriveSummary, flt: RedriveFilter, moves: int) -> None:
    """Say in the summary's warnings that a move call of `flt` was retried after a lost
    reply: its earlier attempt may have moved up to `moves` letters, not in `redriven`."""
    message = (f"{flt.source}: a redrive call was retried after its reply was lost (timeout "
               f"or reset): up to {moves} letters it may have moved are not counted in "
               f"redriven; XLEN {flt.dead_letter_stream} tells what is left")
    log.warning("%s", message)
    summary.warnings.append(message)
