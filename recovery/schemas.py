"""Spark schemas of every DataFrame the job builds, with nullability stated (and, re-exported
from ``recovery.vocabulary``, the Enums and constants of its columns: ``Action``, ``Route``,
``DeathReason``, ``Mode``, ...).

IDs are strings ``"<ms>-<seq>"``; field names and values are binary and survive byte for
byte; times are milliseconds (``idle_ms``) or epoch milliseconds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple, TypeVar

import pyarrow as pa
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
)

from recovery.vocabulary import CARRIED_DELIVERIES as CARRIED_DELIVERIES
from recovery.vocabulary import UNCERTAIN_REASON_PREFIX as UNCERTAIN_REASON_PREFIX
from recovery.vocabulary import Action as Action
from recovery.vocabulary import DeathReason as DeathReason
from recovery.vocabulary import Mode as Mode
from recovery.vocabulary import Route as Route

STREAM = StructField("stream", StringType(), False)
GROUP = StructField("group", StringType(), False)
CONSUMER_NAME = StructField("consumer", StringType(), False)
ENTRY_ID = StructField("id", StringType(), False)
UNIT_KEY = [STREAM, GROUP, CONSUMER_NAME]  # a unit and the job consumer that claims for it

FIELD = StructType(
    [StructField("name", BinaryType(), False), StructField("value", BinaryType(), False)]
)
FIELDS = ArrayType(FIELD, containsNull=False)

# One (stream, group) work unit, built on the driver; `consumer` is the job's consumer name,
# derived from run id and partition so a retried task takes back what its first attempt claimed;
# `cursor`: the shared cursor's key of a unit split over several parts, else null.
UNIT = StructType([*UNIT_KEY, StructField("part", IntegerType(), False),
                   StructField("cursor", StringType(), True)])

# What the XAUTOCLAIM loops returned, each entry joined with its PEL row. `fields` is null
# for entries deleted upstream (`deleted` true) and for entries an earlier task attempt claimed
# (fetched at hand-over); `previous_consumer` and `idle_ms` are the PEL state just before the
# claim, null where unknown; `delivery_count` includes this claim, null where the entry was
# no longer the job's right after it. A run that applies a plan adds `planned_count` (the
# plan's delivery count) and, for a planned entry it left alone, `note` (why); else null.
CLAIMED = StructType(
    [
        *UNIT_KEY,
        ENTRY_ID,
        StructField("deleted", BooleanType(), False),
        StructField("previous_consumer", StringType(), True),
        StructField("idle_ms", LongType(), True),
        StructField("fields", FIELDS, True),
        StructField("delivery_count", LongType(), True),
        StructField("planned_count", LongType(), True),
        StructField("note", StringType(), True),
    ]
)

# A claimed entry on its way to the task of its ordering key (order.key_field): its CLAIMED
# columns, then `order_key` (the key field's value; null: none, the entry is its own key),
# `keyless` (true where the entry has no key of its own), `group_key` (what it is grouped and
# sorted by: the key, or its ID where keyless), `id_order` (its ID as 16 bytes, big-endian
# ms then sequence: sorts as the ID does), `blocked_by` (the oldest older pending entry of its
# key that the run did not claim, as that entry's ID; null: none), `unit_blocked_after` (past
# this ID every entry of its unit is held: the scan of other consumers' entries stopped
# there). A note row (`tally_note` set, the rest empty) carries a claim-stage note.
KEYED = StructType(
    [
        *CLAIMED.fields,
        StructField("order_key", BinaryType(), True),
        StructField("keyless", BooleanType(), False),
        StructField("group_key", BinaryType(), False),
        StructField("id_order", BinaryType(), False),
        StructField("tally_note", BinaryType(), True),
    ]
)

# Older pending entries that hold a key back across runs: per unit and key, the oldest
# entry pending on a consumer that is not this run's (`blocked_by`, its ID); a row with a
# null `order_key` holds every entry of its unit past `blocked_by` (the scan's bound).
BLOCKER = StructType(
    [
        STREAM,
        GROUP,
        StructField("order_key", BinaryType(), True),
        StructField("blocked_by", StringType(), False),
    ]
)

# A planned entry on its way to its unit's task (``--plan``): the unit and its job consumer,
# the entry's ID and its delivery count as the plan (a dry run's report) shows it. A task's
# rows come sorted by stream, group and ID (numerically).
PLANNED = StructType(
    [*UNIT_KEY, ENTRY_ID, StructField("delivery_count", LongType(), True)]
)

# CLAIMED (or any) Arrow batches as Spark carries them: one row per batch, `rows` its number
# of rows, `batch` the batch as Arrow IPC stream bytes (recovery.executor.packing).
PACKED = StructType(
    [StructField("rows", LongType(), False), StructField("batch", BinaryType(), False)]
)

# The scheduler's own id of the run (``--scheduler-run-id``: Airflow's DAG run id, in full),
# null when none was given. The same on every row of a run's report and health files; the
# job's own run id is in their path (``recovery.report.run_report.run_path``), not on every
# row. The report passes leave it null; the writers fill it (``stamped``).
SCHEDULER_RUN_ID = StructField("scheduler_run_id", StringType(), True)

# One row per entry the run touched, as a run's files hold it.
REPORT = StructType(
    [
        STREAM,
        GROUP,
        ENTRY_ID,
        StructField("previous_consumer", StringType(), True),
        StructField("delivery_count", LongType(), True),
        StructField("idle_ms", LongType(), True),
        StructField("action", StringType(), False),
        StructField("reason", StringType(), True),
        StructField("error", StringType(), True),
        StructField("dead_letter_id", StringType(), True),
        StructField("requeued_id", StringType(), True),  # the copy's ID, where requeued
        StructField("reassigned_to", StringType(), True),  # the new owner, where reassigned
        # reprocess.delete_acked: true if the entry was deleted from its stream with its ack
        # (XACKDEL ... ACKED), false if acked but kept because another consumer group still
        # references it; null where the job acked nothing or was not asked to delete.
        StructField("entry_deleted", BooleanType(), True),
        # What re-processing made of the entry, as its mode says (``ReprocessMode``): the
        # copy's ID (requeue), the new owner (reassign); null where it made nothing.
        StructField("outcome", StringType(), True),
        SCHEDULER_RUN_ID,
    ]
)
# The columns that also hold one mode's outcome, as they always did (``requeued_id``: the
# requeue mode's, ``reassigned_to``: the reassign mode's); a mode names its own
# (``ReprocessMode.report_columns``), null in the other modes' rows.
OUTCOME_COLUMNS = ("requeued_id", "reassigned_to")


# Group health as found before the run, one row per (stream, group). Histogram keys are the
# bucket labels of recovery.executor.survey (delivery counts; idle ages); `oldest_idle_ms` is the
# largest idle time in the PEL; consumers are what XINFO CONSUMERS shows (read from
# discovery's XINFO STREAM FULL where it could; `inactive_ms` needs Redis 7.2+ / Valkey, else
# null); `dead_letter_length` is XLEN of the stream's dead-letter
# stream (null in snapshots written before it was collected, or where it could not be read).
CONSUMER = StructType(
    [
        StructField("name", StringType(), False),
        StructField("pending", LongType(), False),
        StructField("idle_ms", LongType(), False),
        StructField("inactive_ms", LongType(), True),
    ]
)
HEALTH = StructType(
    [
        STREAM,
        GROUP,
        StructField("length", LongType(), False),
        StructField("lag", LongType(), True),
        StructField("pending", LongType(), False),
        StructField("consumers", ArrayType(CONSUMER, containsNull=False), False),
        StructField("oldest_idle_ms", LongType(), True),
        StructField("deliveries", MapType(StringType(), LongType(), False), False),
        StructField("idle_ages", MapType(StringType(), LongType(), False), False),
        StructField("dead_letter_length", LongType(), True),
        # Keys held behind dead-lettered heads (order.dead_letter_releases = false: the
        # unit's hash of held keys); null where heads do not hold their keys.
        StructField("held_keys", LongType(), True),
        SCHEDULER_RUN_ID,
    ]
)
PEL_HISTOGRAM = StructType(
    [
        STREAM,
        GROUP,
        StructField("deliveries", MapType(StringType(), LongType(), False), False),
        StructField("idle_ages", MapType(StringType(), LongType(), False), False),
        StructField("oldest_idle_ms", LongType(), True),
    ]
)


def arrow(schema: StructType) -> pa.Schema:
    """The Arrow schema mapInArrow batches must have for a Spark schema."""
    return to_arrow_schema(schema)


REPORT_ARROW = arrow(REPORT)  # every report batch's schema, however it is written


class ReportRow(NamedTuple):
    """One REPORT row by column name: its fields are REPORT's columns, in REPORT's order
    (checked below, at import). Build a row by keyword and a batch by column name
    (``report_batch``), never by position: two string columns swapped would still match the
    schema."""

    stream: str
    group: str
    id: str
    previous_consumer: str | None
    delivery_count: int | None
    idle_ms: int | None
    action: str
    reason: str | None = None
    error: str | None = None
    dead_letter_id: str | None = None
    requeued_id: str | None = None
    reassigned_to: str | None = None
    entry_deleted: bool | None = None
    outcome: str | None = None
    scheduler_run_id: str | None = None  # left null: filled where the report is written


if ReportRow._fields != tuple(REPORT.fieldNames()):
    raise ImportError(f"ReportRow's fields {ReportRow._fields} are not REPORT's columns "
                      f"{tuple(REPORT.fieldNames())}")


def report_batch(columns: Mapping[str, Sequence[Any]]) -> pa.RecordBatch:
    """A REPORT batch from its columns by name: `columns` maps each of REPORT's column
    names (``ReportRow._fields``), no other, to that column's values, one per row; every
    column has the same length. ``scheduler_run_id`` may be left out (null: the writers
    fill it, ``stamped``). Raises ValueError naming the columns missing or unknown."""
    missing = [name for name in ReportRow._fields
               if name not in columns and name != SCHEDULER_RUN_ID.name]
    unknown = sorted(set(columns) - set(ReportRow._fields))
    if missing or unknown:
        raise ValueError(f"REPORT columns missing {missing}, unknown {unknown}")
    rows = len(columns[ReportRow._fields[0]])
    return pa.RecordBatch.from_arrays(
        [pa.array(columns[f.name], f.type) if f.name in columns else pa.nulls(rows, f.type)
         for f in REPORT_ARROW], schema=REPORT_ARROW)


Rows = TypeVar("Rows", pa.RecordBatch, pa.Table)


def stamped(batch: Rows, scheduler_run_id: str | None) -> Rows:
    """`batch` (REPORT or HEALTH rows, a batch or a table) with its ``scheduler_run_id``
    column set to `scheduler_run_id` on every row (null: None)."""
    at = batch.schema.get_field_index(SCHEDULER_RUN_ID.name)
    column = pa.array([scheduler_run_id] * batch.num_rows, pa.string())
    return batch.set_column(at, batch.schema.field(at), column)


def report_rows(rows: Sequence[ReportRow]) -> pa.RecordBatch:
    """A REPORT batch of `rows`, in order."""
    values = list(zip(*rows, strict=True)) if rows else [()] * len(ReportRow._fields)
    return report_batch(dict(zip(ReportRow._fields, values, strict=True)))


# Dead-letter streams, read (recovery/dead_letters/): one row per DLQ key to read, in its part.
DEAD_LETTER_KEY = StructType([StructField("dead_letter_key", StringType(), False),
                              StructField("part", IntegerType(), False)])

# One row per dead letter, as the executors read it. The metadata columns come from the
# entry's x- fields (recovery/redis_io/lua/dead_letter.lua), null where an entry lacks one or
# holds no number where a number belongs; `death_time_ms` is epoch ms (x-death-time), `idle_ms`
# ms. Text is UTF-8, other bytes as \xNN escapes. `fields`: the original fields without the x-
# metadata and x-redrive-count; names as text (escaped likewise), values byte for byte; a
# name that repeats keeps its first value. recovery.dead_letters.views.with_death_time adds
# `death_time`, a timestamp.
DEAD_LETTER = StructType(
    [
        StructField("dead_letter_key", StringType(), False),
        StructField("dead_letter_id", StringType(), False),
        StructField("source_stream", StringType(), True),
        StructField("group", StringType(), True),
        StructField("original_id", StringType(), True),
        StructField("original_consumer", StringType(), True),
        StructField("delivery_count", LongType(), True),
        StructField("delivery_limit", LongType(), True),
        StructField("death_reason", StringType(), True),
        StructField("death_time_ms", LongType(), True),
        StructField("death_run_id", StringType(), True),
        StructField("exception_message", StringType(), True),
        StructField("idle_ms", LongType(), True),
        StructField("redrive_count", LongType(), True),
        StructField("fields", MapType(StringType(), BinaryType(), False), False),
    ]
)
