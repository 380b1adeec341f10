"""The first claim step of many small units in one round trip.

A partition's units come biggest first (``recovery.driver.discovery.assign``). Each unit's
first claim step (XAUTOCLAIM from ``0-0`` with its XPENDING reads,
``recovery.redis_io.autoclaim.first_claims``) is sent ahead, for as many upcoming units at a
time as the last ones suggest: one at a time while units need more than one step (a big
unit's loop goes on as before, and no later unit's entries wait claimed behind it); once
every unit of a round finished in its first step, the next round takes as many units as
together hold about one step's ``claim.count`` entries, judged by the biggest of the round
(at most ``MAX_UNITS``). So a long tail of small streams costs one MULTI per round instead of
one per stream, and Redis never runs a MULTI much bigger than one ordinary step. In those
wide rounds, each unit's claim reads its whole PEL first (one XPENDING of up to
``claim.count`` rows, any owner: ``first_claims`` with `whole`) instead of its idle rows and
its own first entry, which also counts what the claim leaves to other consumers for the
PEL histogram: no read of the unit's PEL follows its hand-over.

Once a round's units all finished in their first steps, the next round is written before
this one's units are handed over, on a connection of its own, and read when its units are
due: Redis runs the next claims while the worker routes, handles and reports this round's
entries (the worker's Python work and Redis's then overlap instead of taking turns). A round
is sent ahead only where the rounds are wide (small units), so no unit's entries wait
claimed behind a big unit's loop; the round's claim is one step like any other, its time
sent is its units' lease reading.

Each unit's claim is still atomic with its reads (the round's MULTI holds them all), and the
claim loop (``recovery.executor.claim.loop.claim_steps``) goes on from each first step exactly
as if it had sent it: a lost reply or an earlier attempt's claim is taken back by its own-entry
read, whatever sent the step (a task that fails with a round sent ahead leaves its entries to
the job's consumer, as any claim whose hand-over did not come). On a Redis Cluster (a MULTI
cannot span slots) every round holds one unit; under a backoff schedule no step is sent
ahead.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from itertools import islice
from typing import NamedTuple

from redis.cluster import RedisCluster

from recovery.params import JobParams, Unit
from recovery.redis_io.autoclaim import ClaimBatch, FirstClaims, first_claims
from recovery.redis_io.redis_conn import RedisConn
from recovery.redis_io.round_trips import send_transaction
from recovery.redis_io.streams import END_CURSOR

MAX_UNITS = 64  # units per round at most


class FirstStep(NamedTuple):
    """A unit's first claim step as sent ahead: its batch, or the error its stream or group
    answered, and when the round was sent (``time.monotonic()`` seconds)."""

    batch: ClaimBatch | Exception
    sent_at: float


def with_first_steps(conn: Callable[[], RedisConn], params: JobParams,
                     units: Iterable[Unit]) -> Iterator[tuple[Unit, FirstStep | None]]:
    """Each unit of `units` (in order) with its first claim step, sent in rounds (see the
    module doc), the next wide round written before this one's units are yielded. `conn`
    gives the partition's connection (opened on first use). Under a backoff schedule (whose
    steps are a script, ``recovery.executor.claim.backoff``) no step is sent ahead: None for
    each."""
    if params.backoff:
        yield from ((unit, None) for unit in units)
        return
    pending = iter(units)
    this, ahead = _Round.of(conn, params, list(islice(pending, 1))), None
    try:
        while this is not None:
            with conn().errors():
                batches = this.read()
            width = 1 if isinstance(conn().client, RedisCluster) else \
                next_width(batches, params.count)
            if width > 1:
                ahead = _Round.ahead(conn(), params, list(islice(pending, width)))
            yield from zip(this.units, (FirstStep(b, this.sent_at) for b in batches),
                           strict=True)
            this, ahead = ahead or _Round.of(conn, params, list(islice(pending, 1))), None
    finally:
        if ahead is not None:
            ahead.drop()


class _Round(NamedTuple):
    """A round's units, when their first steps were sent (``time.monotonic()`` seconds), how
    to read them, and how to drop them unread."""

    units: list[Unit]
    sent_at: float
    read: Callable[[], list[ClaimBatch | Exception]]
    drop: Callable[[], None]

    @classmethod
    def of(cls, conn: Callable[[], RedisConn], params: JobParams, units: list[Unit]
           ) -> _Round | None:
        """A round of one unit, sent and read in one round trip when read (any server);
        None for no unit (and no client opened)."""
        if not units:
            return None
        claims = _claims(params, units, whole=False)
        return cls(units, time.monotonic(), lambda: first_claims(
            conn().client, claims.units, params.min_idle_ms, params.count), lambda: None)

    @classmethod
    def ahead(cls, conn: RedisConn, params: JobParams, units: list[Unit]) -> _Round | None:
        """A wide round written now on a connection of its own (a standalone server); None
        for no units."""
        if not units:
            return None
        claims, sent_at = _claims(params, units, whole=True), time.monotonic()
        with conn.errors():
            sent = send_transaction(conn.client, claims.commands())
        return cls(units, sent_at, lambda: claims.batches(sent.replies()), sent.drop)


def _claims(params: JobParams, units: list[Unit], whole: bool) -> FirstClaims:
    return FirstClaims(units, params.min_idle_ms, params.count, whole)


def next_width(batches: list[ClaimBatch | Exception], count: int) -> int:
    """Units in the next round: 1 unless every unit of this round finished in its first step
    (an error counts as finished); then about `count` entries' worth of units the size of
    this round's biggest, from 1 to MAX_UNITS."""
    sizes = []
    for batch in batches:
        if isinstance(batch, Exception):
            continue
        if batch.next_cursor != END_CURSOR:
            return 1
        sizes.append(len(batch.ids) + len(batch.deleted))
    return max(1, min(MAX_UNITS, count // max([1, *sizes])))
