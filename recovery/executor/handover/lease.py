"""The lease of entries being handed over, and their acks, on an executor.

Between a claim and the handler call an entry can change hands: a live consumer may ack it,
another run may claim it. Before each handler call the job therefore checks, and renews, that
the entries are still pending and owned by its consumer:

1. the lease: one pipelined ``XPENDING <first> <last> <n> <job consumer>`` read per unit,
   for up to ``LEASE_ROWS`` rows at a time and again before a call whenever the last read
   is older than ``LEASE_FRESH_S`` (sent together with the XACKs so far: a fast handler
   costs one round trip per ``LEASE_ROWS`` rows). Only entries still pending and owned by
   the job's consumer are handed over. Entries claimed or renewed less than
   ``fresh_lease_ms`` less ``LEASE_FRESH_S`` ago (:func:`reading_fresh_ms`: a reading
   serves calls that long) already hold a fresh lease; older ones are renewed atomically by
   ``lease_owned.lua`` (ownership checked again, idle time reset). So an entry a live
   consumer acked, or another run claimed, since the claim is not handed over unless that
   happened in the last ``LEASE_FRESH_S``, and no other run claims a chunk while the handler
   works on it (``handler.timeout_s``). A batch handed over straight after its claim (one
   pass) skips the first read: the claim itself read the lease, as long as it is younger
   than ``LEASE_FRESH_S``. Each row's lease counts from when its reading was sent, less
   the idle time read: a reply that came back late is read (renewed) again before a call
   the lease would not outlast (``HandOver.leased_now``).
2. the handler call;
3. XACK of the entries it succeeded on. The ack is unconditional on purpose: the entry has
   been processed, and only a claim with a shorter ``min_idle_ms`` than the call could have
   moved it meanwhile. XACK's reply (a count) tells whether someone else acked some of them
   since their lease; those rows say so in their reason. With ``reprocess.delete_acked`` the
   ack is ``XACKDEL ... ACKED`` (Redis 8.2+; one code per ID: 1 acked and deleted from the
   stream, 2 acked but kept because another group still references it, -1 not pending any
   more): each row's ``entry_deleted`` says which. A -1 for an entry no longer in its stream
   is this ack's own deletion answered again (a lost reply, the XACKDEL sent again).

Round trips are few: a lease read goes out with the acks queued so far, one pipeline per
``LEASE_ROWS`` rows for a fast handler.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import redis

from recovery.executor.handover.routed import RoutedBatch
from recovery.handlers import Result
from recovery.params import Unit
from recovery.redis_io.commands import (
    ack_command,
    ack_delete_command,
    entry_command,
    pending_summaries,
    pending_summary_command,
)
from recovery.redis_io.error_codes import VANISHED, unit_vanished
from recovery.redis_io.round_trips import ScriptCall, each, run_script_calls
from recovery.redis_io.scripts import (
    ACKDEL_DELETED,
    ACKDEL_GONE,
    ACKDEL_KEPT,
    LEASE_DELETED,
    LEASE_FRESH_S,  # a lease read older than this is read again before the next call
    LEASE_RENEWED,
    renew_lease,
)
from recovery.redis_io.streams import ID, IDLE, pending_command
from recovery.schemas import Action

LEASE_PAGE_SLACK = 64  # extra XPENDING rows per lease read (other entries of ours in range)
# A lease read whose first page comes back full (rows spread thin over a range that holds
# many other entries of the job's consumer, as the heads of a per-key ordered wave are) reads
# its further pages this many times larger each, up to LEASE_PAGE_MAX rows: the same entries
# read in fewer round trips (Redis scans the range once either way).
LEASE_PAGE_GROWTH = 8
LEASE_PAGE_MAX = 10_000
LEASE_ROWS = 1000  # rows whose lease is read in one round trip (whole handler batches)
LEASE_TRIES = 3  # lease reads of a chunk that came back too late, before it is given up

REASON_GONE = ("no longer pending for the job's consumer (acked by a consumer or by an earlier "
               "attempt of this task, or claimed by another consumer)")
REASON_DELETED = "entry deleted from the stream upstream; only its PEL slot was left"
REASON_VANISHED = "the stream or its consumer group vanished during the run (deleted or replaced)"
REASON_LATE = ("not handed to the handler: its lease could not be read back in time (Redis's "
               "replies took longer than claim.min_idle_ms less handler.timeout_s); stays "
               "pending for the next run")


def reading_fresh_ms(fresh_ms: int) -> int:
    """The idle time (ms) below which a lease reading lets an entry be handed over without
    renewal: `fresh_ms` (``fresh_lease_ms``: the call must end before the entry has been idle
    ``min_idle_ms``) less ``LEASE_FRESH_S``, since a reading serves calls up to that long
    after it. An entry read idle just under `fresh_ms` and handed over ``LEASE_FRESH_S``
    later would otherwise reach ``min_idle_ms`` before a call of ``handler.timeout_s``
    ends, and another run could claim it during the call. Never below 0 (always renew)."""
    return max(0, fresh_ms - int(LEASE_FRESH_S * 1000))


@dataclass
class HandOver:
    """Lease reads and acks of one batch's hand-over, batched into few round trips."""

    client: redis.Redis
    rb: RoutedBatch
    fresh_ms: int
    read_at: float = 0.0
    to_ack: list[int] = field(default_factory=list)
    delete_acked: bool = False  # ack with XACKDEL ... ACKED (reprocess.delete_acked)
    # A call may start only while every row's lease is younger than this (s): the call must
    # end before the entry has been idle min_idle_ms (``fresh_lease_ms``); None (no
    # handler.timeout_s, so no bound on the call): only rows never read are read first.
    budget_s: float | None = None
    # Row -> the latest time.monotonic() at which its idle time was surely 0 or less: a
    # reading's send time less the idle time it read, a renewal's send time, a claim's.
    leased_at: dict[int, float] = field(default_factory=dict)

    def stale(self) -> bool:
        """Whether the last reading of the lease is older than LEASE_FRESH_S."""
        return time.monotonic() - self.read_at > LEASE_FRESH_S

    def lease(self, rows: list[int]) -> None:
        """Send the acks so far and read the lease of `rows`, in one round trip. The rows
        not leased get their outcome; the leased ones are those still without one. The
        reading counts from when it was sent."""
        sent_at = time.monotonic()
        _ack_and_lease(self.client, self.rb, self.to_ack, rows, self.fresh_ms,
                       self.delete_acked, (sent_at, self.leased_at))
        self.to_ack = []
        if rows:
            self.read_at = sent_at

    def leased_now(self, rest: list[int], size: int) -> list[int]:
        """The leased rows among the next `size` of `rest` (rows not handed over yet),
        reading their lease again first when the last read is older than LEASE_FRESH_S.

        A row not read yet (a window after the first, reached within ``LEASE_FRESH_S`` of
        the last reading), or one whose reading came back late (a stalled link, a server
        blocked between running a command and writing its reply), may hold no lease a call
        outlasts (one that ends before the entry has been idle ``min_idle_ms``): such rows
        are read (renewed where needed) now, up to
        ``LEASE_TRIES`` times; those still too old are not handed over (``failed``, they
        stay pending)."""
        if self.stale():
            self.lease(self._open(rest))
        for _ in range(LEASE_TRIES):
            late = self._late(rest[:size])
            if not late:
                break
            self.lease(late)
        for i in self._late(rest[:size]):
            self.rb.set(i, Action.FAILED, REASON_LATE)
        return self._open(rest[:size])

    def _late(self, rows: list[int]) -> list[int]:
        """The open rows of `rows` not leased yet, or (with a budget) whose lease is too old
        for a call to start now."""
        budget, leased_at = self.budget_s, self.leased_at
        oldest = time.monotonic() - (budget or 0.0)
        return [i for i in self._open(rows) if i not in leased_at
                or (budget is not None and leased_at[i] <= oldest)]

    def _open(self, rows: list[int]) -> list[int]:
        return [i for i in rows if self.rb.action[i] is None]

    def succeeded(self, rows: list[int], results: list[Result]) -> None:
        """Queue the rows the handler succeeded on for the next round trip's XACK."""
        self.to_ack += [i for i, res in zip(rows, results, strict=True) if res.ok]


def _ack_and_lease(client: redis.Redis, rb: RoutedBatch, to_ack: list[int], to_lease: list[int],
                   fresh_ms: int, delete_acked: bool = False,
                   leased: tuple[float, dict[int, float]] | None = None) -> None:
    """XACK `to_ack` (report them) and read the lease of `to_lease`, in one round trip.

    The rows of `to_lease` not to hand over get their outcome (skipped, deleted); the others
    keep none until the handler has had them. `leased`: (when the read was sent, row ->
    lease time, filled in for the rows leased: ``HandOver.leased_at``).
    """
    acks = rb.by_unit(to_ack)
    leases = rb.by_unit(to_lease)
    reads = [_lease_read(rb, unit, rows) for unit, rows in leases.items()]
    replies = each(client, xack_commands(rb, acks, delete_acked) + reads)
    _report_acks(client, rb, acks, replies[: len(acks)])
    stale = []
    for (unit, unit_rows), reply in zip(leases.items(), replies[len(acks):], strict=True):
        owned = _owned_idle(client, rb, unit, unit_rows, reply)
        for i in unit_rows:
            idle = owned.get(rb.id[i]) if owned is not None else None
            if owned is None:
                rb.set(i, Action.SKIPPED, REASON_VANISHED)
            elif idle is None:
                rb.set(i, Action.SKIPPED, REASON_GONE)
            elif idle >= fresh_ms:
                stale.append(i)
            elif leased is not None:
                leased[1][i] = leased[0] - idle / 1000
    renewed_at = time.monotonic()
    for i in _renew(client, rb, stale, fresh_ms):
        if leased is not None:
            leased[1][i] = renewed_at


def xack_commands(rb: RoutedBatch, by_unit: dict[Unit, list[int]], delete_acked: bool = False
                  ) -> list[tuple[object, ...]]:
    """One XACK command per unit, of the rows' IDs (for a pipeline; the reply is a count);
    with `delete_acked`, XACKDEL ... ACKED instead (the reply: one code per ID)."""
    command = ack_delete_command if delete_acked else ack_command
    return [command(unit.stream, unit.group, [rb.id[i] for i in unit_rows])
            for unit, unit_rows in by_unit.items()]


def _lease_read(rb: RoutedBatch, unit: Unit, rows: list[int], start: str | None = None,
                count: int | None = None) -> tuple[object, ...]:
    """XPENDING of the job consumer's entries in the rows' ID range (from `start`, if given),
    at most `count` of them (default: the first page's, :func:`_first_page`)."""
    stream, group, consumer = unit.stream, unit.group, unit.consumer
    first, last = rb.id_range(rows)
    return pending_command(stream, group, start or first, last, count or _first_page(rows),
                           consumer)


def _first_page(rows: list[int]) -> int:
    """Rows asked for by a lease read's first XPENDING page."""
    return len(rows) + LEASE_PAGE_SLACK


def _owned_idle(client: redis.Redis, rb: RoutedBatch, unit: Unit, rows: list[int],
                reply: Any) -> dict[str, int] | None:
    """Entry ID -> idle ms of the job consumer's entries in the rows' ID range, reading more
    pages while a page comes back full; None when the stream or group vanished.

    `reply` is the first page (XPENDING extended form: [id, consumer, idle ms, count] rows);
    each further page asks for LEASE_PAGE_GROWTH times as many rows (up to LEASE_PAGE_MAX).
    """
    owned: dict[str, int] = {}
    count = _first_page(rows)
    while True:
        if isinstance(reply, Exception):
            if unit_vanished(reply):
                return None
            raise reply
        for row in reply:
            owned[row[ID].decode()] = int(row[IDLE])
        if len(reply) < count:
            return owned
        after = "(" + reply[-1][ID].decode()
        count = max(count, min(count * LEASE_PAGE_GROWTH, LEASE_PAGE_MAX))
        reply = each(client, [_lease_read(rb, unit, rows, start=after, count=count)])[0]


def _renew(client: redis.Redis, rb: RoutedBatch, rows: list[int], fresh_ms: int) -> list[int]:
    """Renew the lease of `rows` (owned, not fresh) atomically; report those not renewed;
    return those renewed."""
    if not rows:
        return []
    calls: list[ScriptCall] = [
        (unit_rows, partial(renew_lease, client, unit, [rb.id[i] for i in unit_rows],
                            fresh_ms=fresh_ms))
        for unit, unit_rows in rb.by_unit(rows, ordered=True).items()]
    renewed = []
    for i, reply in run_script_calls(client, calls):
        if reply == LEASE_RENEWED:
            renewed.append(i)
        elif reply == LEASE_DELETED:
            rb.set(i, Action.DELETED, REASON_DELETED)
        elif reply == VANISHED:
            rb.set(i, Action.SKIPPED, REASON_VANISHED)
        else:
            rb.set(i, Action.SKIPPED, REASON_GONE)
    return renewed


def _report_acks(client: redis.Redis, rb: RoutedBatch, acks: dict[Unit, list[int]],
                 replies: list[Any]) -> None:
    """Report rows handled and acked, per unit, from XACK's replies (a count per unit).

    XACK counts 0 for an entry someone else acked first, and also for a stream or group that
    no longer exists. A short count is therefore told apart with one XPENDING summary per
    such unit (NOGROUP: vanished), sent only then. XACKDEL's codes (a list) count the IDs
    it acked (1, 2) and set each row's ``entry_deleted``.
    """
    gone = _gone_since_lease(client, rb, acks, replies)
    replies = [_acked_count(rb, rows, reply, gone)
               for rows, reply in zip(acks.values(), replies, strict=True)]
    short = [unit for (unit, rows), reply in zip(acks.items(), replies, strict=True)
             if not isinstance(reply, Exception) and int(reply) < len(rows)]
    probes = pending_summaries(client, [(unit.stream, unit.group) for unit in short])
    vanished = {unit for unit, probe in zip(short, probes, strict=True)
                if isinstance(probe, Exception) and unit_vanished(probe)}
    for (unit, rows), reply in zip(acks.items(), replies, strict=True):
        if isinstance(reply, Exception) and not unit_vanished(reply):
            raise reply
        if isinstance(reply, Exception) or unit in vanished:
            for i in rows:
                rb.set(i, Action.SKIPPED, "handled, but " + REASON_VANISHED + " before the ack")
            continue
        reason = None
        if int(reply) < len(rows):
            reason = (f"handled; {len(rows) - int(reply)} of the {len(rows)} entries acked "
                      "with it had been acked by another consumer since their lease")
        rb.set_rows(rows, Action.REPROCESSED, reason)


def _gone_since_lease(client: redis.Redis, rb: RoutedBatch, acks: dict[Unit, list[int]],
                      replies: list[Any]) -> set[int]:
    """The rows XACKDEL answered -1 (not pending any more) whose entry is no longer in its
    stream while the stream and group still are (one pipelined ``XRANGE <id> <id>`` per such
    row and ``XPENDING <stream> <group>`` per unit, sent only then). A reply lost and the
    XACKDEL sent again (the client's retry policy) answers -1 for what the first call acked
    and deleted; the entry's absence tells it from a plain XACK by another consumer, which
    leaves the entry (an XACKDEL by another consumer of the job's group in the moment since
    the lease cannot be told apart: it counts as the job's). XACKDEL answers -1 too on a
    stream or group deleted since the lease (no NOGROUP): those rows are not gone."""
    rows = {unit: [i for i, code in zip(unit_rows, reply, strict=True)
                   if int(code) == ACKDEL_GONE]
            for (unit, unit_rows), reply in zip(acks.items(), replies, strict=True)
            if isinstance(reply, list)}
    rows = {unit: unit_rows for unit, unit_rows in rows.items() if unit_rows}
    units = list(rows)
    found = each(client, [pending_summary_command(unit.stream, unit.group) for unit in units]
                 + [entry_command(rb.stream[i], rb.id[i]) for u in units for i in rows[u]])
    left = dict(zip(units, found, strict=False))  # the first len(units) replies
    entries = iter(found[len(units):])
    return {i for unit in units for i in rows[unit]
            if next(entries) == [] and not isinstance(left[unit], Exception)}


def _acked_count(rb: RoutedBatch, rows: list[int], reply: Any, gone: set[int]) -> Any:
    """XACK's reply as it is; XACKDEL's codes (one per row) noted on the rows
    (``entry_deleted``: 1 deleted, 2 kept, -1 not acked by this call, unless the row is in
    `gone`: acked and deleted by this call's first sending) and counted as XACK would
    count them."""
    if not isinstance(reply, list):
        return reply
    acked = 0
    for i, code in zip(rows, reply, strict=True):
        if int(code) in (ACKDEL_DELETED, ACKDEL_KEPT) or i in gone:
            rb.entry_deleted[i] = int(code) != ACKDEL_KEPT
            acked += 1
    return acked
