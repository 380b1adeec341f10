"""Where Spark partitions meet Redis for per-key ordered recovery (``order.key_field``): the
mapInArrow functions between the materialised claim and the ordered hand-over.

- ``keyed_partition``: PACKED rows of CLAIMED batches -> KEYED rows, one per entry, with its
  ordering key (the key field's value; an entry taken back from an earlier task attempt has
  its fields read for it) and its ID as sortable bytes; claim-stage notes pass as note rows;
- ``keyed_claim_partition``: UNIT rows -> KEYED rows: the claim and ``keyed_partition`` in
  one task (what the driver materialises: no Python pass of its own for the keys);
- ``blocker_partition``: UNIT rows (one per stream and group) -> BLOCKER rows: per key, the
  oldest entry pending on a consumer that is not this run's (``recovery.redis_io.held_keys``);
- ``ordered_partition``: KEYED rows joined with BLOCKER, shuffled by (stream, group, key) and
  sorted by ID within each partition -> REPORT rows (a report pass:
  ``recovery.executor.handover.ordered``).
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import redis

from recovery.executor.claimed import Claimed
from recovery.executor.handover.lease import LEASE_ROWS
from recovery.executor.handover.ordered import KeyT, apply_in_order
from recovery.executor.key_buckets import BucketCounts, count_buckets
from recovery.executor.packing import NOTE_ROWS, ArrowFn, unpack
from recovery.executor.partitions import (
    PartitionConn,
    claim_partition,
    coalesced,
    young_collections_rarer,
)
from recovery.executor.tally import PassMaker, Tally
from recovery.params import JobParams, OrderParams
from recovery.redis_io.error_codes import unit_vanished
from recovery.redis_io.held_keys import (
    UNREAD,
    consumers_with_pending,
    not_this_runs,
    pending_elsewhere,
)
from recovery.redis_io.key_holds import hold_key, read_heads
from recovery.redis_io.redis_conn import RedisConn
from recovery.redis_io.streams import Fields, fetch_entries, stream_id_key
from recovery.schemas import BLOCKER, CLAIMED, KEYED, arrow

if TYPE_CHECKING:
    from pyspark.accumulators import Accumulator

log = logging.getLogger(__name__)
KEYED_ARROW = arrow(KEYED)
BLOCKER_ARROW = arrow(BLOCKER)
CLAIMED_NAMES = CLAIMED.fieldNames()


def id_order(entry_id: str) -> bytes:
    """A stream ID as 16 bytes, big-endian milliseconds then sequence: byte order (Spark
    sorts binary as unsigned bytes) is ID order."""
    ms, seq = stream_id_key(entry_id)
    return ms.to_bytes(8, "big") + seq.to_bytes(8, "big")


def key_of(fields: Fields | None, name: str | None) -> bytes | None:
    """The value of the first field `name` in `fields`; None without one (or unordered)."""
    if name is None or fields is None:
        return None
    key = name.encode()
    return next((value for field, value in fields if field == key), None)


def keyed_partition(params: JobParams, counts: Accumulator[BucketCounts] | None = None,
                    buckets: int = 1) -> ArrowFn:
    """PACKED rows -> KEYED rows (module doc); with `counts`, the task's entries per bucket
    of `buckets` (``recovery.executor.key_buckets``) are added to it once it has keyed them
    all."""
    order = params.order
    assert order is not None

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        conn = PartitionConn(params.redis)
        task_counts: Counter[int] = Counter()
        try:
            for packed in batches:
                for count, blob in zip(packed.column("rows").to_pylist(),
                                       packed.column("batch"), strict=True):
                    if count == NOTE_ROWS:
                        yield _note_row(blob.as_py())
                        continue
                    keyed = _keyed(conn, order, unpack(blob.as_buffer()))
                    if counts is not None:
                        task_counts.update(count_buckets(
                            keyed.column("group_key").to_pylist(), buckets))
                    yield keyed
        finally:
            conn.close()
        if counts is not None:
            counts.add(dict(task_counts))

    return run


def keyed_claim_partition(params: JobParams, histograms: bool = False,
                          counts: Accumulator[BucketCounts] | None = None,
                          buckets: int = 1) -> ArrowFn:
    """UNIT rows -> KEYED rows: ``claim_partition``'s claim, each PACKED row keyed as it
    comes (``keyed_partition``, counting into `counts` by `buckets`) in the same task, in
    batches of at least LEASE_ROWS rows (Spark pays per batch it takes from Python)."""
    claim = claim_partition(params, histograms)
    keyed = keyed_partition(params, counts, buckets)
    return coalesced(lambda batches: keyed(claim(batches)), LEASE_ROWS)


def _keyed(conn: PartitionConn, order: OrderParams, batch: pa.RecordBatch
           ) -> pa.RecordBatch:
    claimed = Claimed.from_arrow(batch)
    fields: list[Fields | None] = list(claimed.fields)
    missing = [i for i, f in enumerate(fields) if f is None and not claimed.deleted[i]]
    if missing:  # taken back from an earlier attempt: the claim did not read them
        partition = conn.get()
        with partition.errors():
            for stream in {claimed.stream[i] for i in missing}:
                rows = [i for i in missing if claimed.stream[i] == stream]
                try:
                    found = fetch_entries(partition.client, stream, [claimed.id[i] for i in rows])
                except redis.ResponseError as exc:
                    if not unit_vanished(exc):
                        raise
                    continue  # the stream is gone: the hand-over reports its entries
                for i in rows:
                    fields[i] = found[claimed.id[i]]
    keys = [key_of(f, order.field_of(s)) for f, s in zip(fields, claimed.stream, strict=True)]
    keyless = [k is None for k in keys]
    group_key = [i.encode() if k is None else k for k, i in zip(keys, claimed.id, strict=True)]
    extra = [pa.array(keys, pa.binary()), pa.array(keyless, pa.bool_()),
             pa.array(group_key, pa.binary()),
             pa.array([id_order(i) for i in claimed.id], pa.binary()),
             pa.nulls(len(keys), pa.binary())]
    return pa.RecordBatch.from_arrays([*batch.select(CLAIMED_NAMES).columns, *extra],
                                      schema=KEYED_ARROW)


def _note_row(note: bytes) -> pa.RecordBatch:
    """A KEYED row that carries a claim-stage note (``recovery.executor.tally.note``)."""
    columns: list[Any] = []
    for field in KEYED_ARROW:
        if field.name == "tally_note":
            columns.append(pa.array([note], pa.binary()))
        elif field.nullable:
            columns.append(pa.nulls(1, field.type))
        elif pa.types.is_boolean(field.type):
            columns.append(pa.array([False]))
        else:
            columns.append(pa.array([b"" if pa.types.is_binary(field.type) else ""],
                                    field.type))
    return pa.RecordBatch.from_arrays(columns, schema=KEYED_ARROW)


def blocker_partition(params: JobParams, own_stem: str) -> ArrowFn:
    """UNIT rows -> BLOCKER rows: for each unit, the entries pending on consumers that are
    not this run's (`own_stem` and a part number: ``is_job_consumer``), at most
    ``order.scan_max`` per consumer, read with their fields; per key, the oldest such
    entry's ID; where a consumer owns more, a row with a null key and the bound (every later
    entry of the unit is held)."""
    order = params.order
    assert order is not None

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        conn = PartitionConn(params.redis)
        try:
            for batch in batches:
                for unit in batch.to_pylist():
                    rows = _blockers(conn.get().client, order, unit["stream"], unit["group"],
                                     own_stem)
                    if rows:
                        yield pa.RecordBatch.from_pylist(rows, schema=BLOCKER_ARROW)
        finally:
            conn.close()

    return run


def _blockers(client: redis.Redis, order: OrderParams, stream: str, group: str,
              own_stem: str) -> list[dict[str, Any]]:
    name = order.field_of(stream)
    if name is None:
        return []
    others = [c for c in consumers_with_pending(client, stream, group)
              if not_this_runs(c, own_stem)]
    if not others:
        return []
    entries, bound = pending_elsewhere(client, stream, group, others, order.scan_max,
                                       own_stem)
    oldest: dict[bytes, str] = {}
    for entry_id, _owner, fields in entries:
        key = key_of(fields, name)
        if key is not None and (key not in oldest or
                                stream_id_key(entry_id) < stream_id_key(oldest[key])):
            oldest[key] = entry_id
    rows: list[dict[str, Any]] = [{"stream": stream, "group": group, "order_key": k,
                                   "blocked_by": i} for k, i in oldest.items()]
    if bound is not None and bound != UNREAD:  # UNREAD: pending_elsewhere's WARNING said why
        log.warning("%s / %s: more than order.scan_max (%d) entries pending on one consumer; "
                    "its entries past %s were not read: every entry of the group after it is "
                    "held", stream, group, order.scan_max, bound)
    if bound is not None:
        rows.append({"stream": stream, "group": group, "order_key": None, "blocked_by": bound})
    return rows


def ordered_partition(params: JobParams, rows: int) -> PassMaker:
    """The ordered frame's rows (KEYED plus ``blocked_by`` and ``unit_blocked_after``, sorted
    by stream, group, key and ID) -> REPORT batches, in steps of about `rows` entries (a
    key's entries may span steps: the keys held at a step's end carry on into the next)."""
    order = params.order
    assert order is not None

    def make(tally: Tally) -> ArrowFn:
        def apply(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            conn = PartitionConn(params.redis)
            carried: dict[KeyT, str] = {}
            try:
                with young_collections_rarer():
                    for batch in batches:
                        notes = batch.column("tally_note")
                        for note in notes.drop_null().to_pylist():
                            tally.add_note(note)
                        entries = batch if notes.null_count == batch.num_rows else \
                            batch.filter(notes.is_null())
                        for start in range(0, entries.num_rows, rows):
                            yield _apply(conn.get(), params, order,
                                         entries.slice(start, rows), carried)
            finally:
                conn.close()

        return apply

    return make


def _apply(conn: RedisConn, params: JobParams, order: OrderParams,
           batch: pa.RecordBatch, carried: dict[KeyT, str]) -> pa.RecordBatch:
    claimed = Claimed.from_arrow(batch.select(CLAIMED_NAMES))
    col = batch.column
    keys: list[KeyT] = list(zip(claimed.stream, claimed.group, col("keyless").to_pylist(),
                                col("group_key").to_pylist(), strict=True))
    blocked = [_blocked_reason(order, *row) for row in zip(
        claimed.stream, claimed.id, col("order_key").to_pylist(),
        col("blocked_by").to_pylist(), col("unit_blocked_after").to_pylist(), strict=True)]
    if not order.dead_letter_releases:
        with conn.errors():
            recorded = _held_by_record(conn.client, order, claimed.stream, claimed.group,
                                       claimed.id, col("order_key").to_pylist())
        blocked = [b or r for b, r in zip(blocked, recorded, strict=True)]
    keyless: list[str] = []
    if order.missing_key == "dead_letter":
        keyless = [(order.field_of(s) or "") if k is None else "" for s, k in zip(
            claimed.stream, col("order_key").to_pylist(), strict=True)]
    with conn.errors():
        return apply_in_order(conn.client, params, claimed, keys, blocked, carried, keyless)


def _held_by_record(client: redis.Redis, order: OrderParams, streams: Sequence[str],
                    groups: Sequence[str], ids: Sequence[str], keys: Sequence[bytes | None]
                    ) -> list[str | None]:
    """Per row, why it is held behind a head dead-lettered earlier (this run, a failed
    attempt of this task or an earlier run: the unit's hash of held keys,
    ``recovery.redis_io.key_holds``), or None: a row of a key held there whose ID is after
    the recorded head's. One HMGET per unit of the rows, pipelined."""
    wanted: dict[tuple[str, str], dict[bytes, None]] = {}
    for stream, group, key in zip(streams, groups, keys, strict=True):
        if key is not None:
            wanted.setdefault((stream, group), {})[key] = None
    units = list(wanted)
    names = [hold_key(order.hold_prefix, s, g) for s, g in units]
    found = read_heads(client, [(n, list(wanted[u])) for n, u in zip(names, units, strict=True)])
    heads = {(u, k): h for u, n, hs in zip(units, names, found, strict=True)
             for k, h in zip(wanted[u], hs, strict=True) if h is not None}
    name_of = dict(zip(units, names, strict=True))
    reasons: list[str | None] = []
    for stream, group, entry_id, key in zip(streams, groups, ids, keys, strict=True):
        hold = heads.get(((stream, group), key)) if key is not None else None
        if hold is None or stream_id_key(hold[0]) >= stream_id_key(entry_id):
            reasons.append(None)
            continue
        reasons.append(f"held behind {hold[0]} of its key, dead-lettered as {hold[1]} "
                       "(order.dead_letter_releases = false) until its field is deleted from "
                       f"{name_of[(stream, group)]!r}")
    return reasons


def _blocked_reason(order: OrderParams, stream: str, entry_id: str, key: bytes | None,
                    blocked_by: str | None, unit_after: str | None) -> str | None:
    """Why an entry is held before any hand-over, or None: it has no key field and
    ``order.missing_key`` is ``hold``; an older entry of its key is pending elsewhere; or the
    scan of other consumers' entries stopped before it (an entry without a key is of no
    key those entries could hold)."""
    name = order.field_of(stream)
    here = stream_id_key(entry_id)
    if key is None and name is not None and order.missing_key == "hold":
        return f"held: no {name!r} field to order it by (order.missing_key = hold)"
    if blocked_by is not None and stream_id_key(blocked_by) < here:
        return (f"held behind {blocked_by} of its key, pending on another consumer and not "
                "claimed by this run")
    if unit_after is not None and key is not None and stream_id_key(unit_after) < here:
        return (f"held: entries pending elsewhere past {unit_after} were not read "
                "(order.scan_max, or consumers kept taking entries: see the log), one may be "
                "of its key")
    return None
