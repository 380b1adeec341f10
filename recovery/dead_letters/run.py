"""A dead-letter read, orchestrated on the driver (``jobs/dead_letters.py``,
``recovery.run_dead_letters``; ``recovery.read_dead_letters`` for the rows alone).

1. select the dead-letter streams: those of the streams ``streams.keys`` / ``streams.match``
   select (``dead_letter.suffix`` or ``dead_letter.stream``; a shared one once); look at
   each (TYPE, XLEN, its oldest entry) and warn;
2. read them in parallel, one Spark partition per group of keys (on a Redis Cluster, the
   keys of one primary), each in pages of XRANGE (``recovery.dead_letters.read``);
3. group once into causes (checkpointed: Redis is read once), then the two views, written
   as Parquet, logged as tables and summed up in the JSON summary.

Read-only unless retention is on (``dead_letters.max_age_s`` / ``max_length``): then, after
the views are written, the letters past a limit are trimmed (``recovery.dead_letters.retention``).
Nothing else is written or deleted.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from recovery.dead_letters.read import read_partition
from recovery.dead_letters.report import (
    ENTRIES,
    DeadLetterSummary,
    fixed_width,
    iso_time,
    views_path,
)
from recovery.dead_letters.retention import apply_retention, retention_warnings
from recovery.dead_letters.views import (
    by_reason,
    by_signature,
    causes,
    with_death_time,
    with_scheduler_run_id,
)
from recovery.params import DeadLetterReadParams, RedisParams
from recovery.redis_io.cluster import biggest_first, groups_by_node
from recovery.redis_io.redis_conn import RedisConn
from recovery.report.console_links import console_links, link_lines
from recovery.report.run_report import check_report_location
from recovery.rows import DeadLetterSignature, DeadLetterStreamRead, Skipped
from recovery.schemas import DEAD_LETTER, DEAD_LETTER_KEY
from recovery.settings.model import Settings, redis_params
from recovery.spark.errors import spark_errors
from recovery.spark.transforms import units_of_parts
from recovery.targets.dead_letter_streams import (
    DENIED,
    DeadLetterStream,
    dead_letter_pairs,
    inspect_streams,
    now_ms,
    warnings_for,
)
from recovery.targets.keys import check_server

log = logging.getLogger(__name__)
LOGGED_ROWS = 20  # rows of each view in the log
REASON_COLUMNS = ["source_stream", "group", "death_reason", "dead_letters", "first_death_time",
                  "last_death_time"]
SIGNATURE_COLUMNS = ["dead_letters", "signature", "last_death_time", "example_dead_letter_id"]


def find_dead_letter_streams(settings: Settings, params: RedisParams
                             ) -> tuple[list[DeadLetterStream], list[Skipped]]:
    """The dead-letter streams the config points at, as found (server checked first), and
    what is skipped: sources without a dead-letter name, dead-letter keys of another type."""
    with RedisConn.open(params) as conn:
        check_server(conn)
        skipped: list[Skipped] = []
        streams = inspect_streams(conn, dead_letter_pairs(conn, settings, skipped))
    for s in streams:
        if s.status == "wrong-type":
            skipped.append(Skipped(s.source, None, f"{s.key} is a {s.kind}, not a stream: "
                                   "not read"))
        elif s.status == DENIED:
            skipped.append(Skipped(s.source, None, f"the Redis user may not access {s.key} "
                                   "(ACL key patterns): not read"))
    return streams, skipped


def key_parts(streams: list[DeadLetterStream], partitions: int) -> list[list[dict[str, Any]]]:
    """DEAD_LETTER_KEY rows per part: at most `partitions` parts, the biggest stream first
    onto the lightest part, and on a Redis Cluster only keys of one primary in a part."""
    by_part: list[list[dict[str, Any]]] = []
    for group, parts in groups_by_node(streams, partitions, lambda s: s.node,
                                       lambda s: s.length):
        placed: list[list[dict[str, Any]]] = [[] for _ in range(parts)]
        for s, part in biggest_first(sorted(group, key=lambda s: s.key), lambda s: s.length,
                                     parts):
            placed[part].append({"dead_letter_key": s.key, "part": len(by_part) + part})
        by_part += placed
    return by_part


def read_frame(spark: SparkSession, settings: Settings, streams: list[DeadLetterStream]
               ) -> DataFrame:
    """DEAD_LETTER rows with ``death_time`` of the `streams` that hold entries (lazy: each
    action reads Redis again)."""
    full = [s for s in streams if s.status == "read"]
    if not full:
        return spark.createDataFrame([], DEAD_LETTER).transform(with_death_time())
    params = DeadLetterReadParams(redis_params(settings), settings.dead_letters.page_size)
    keys = units_of_parts(spark, key_parts(full, settings.spark.partitions), DEAD_LETTER_KEY)
    return keys.mapInArrow(read_partition(params), DEAD_LETTER).transform(with_death_time())


def read_dead_letters(spark: SparkSession, settings: Settings) -> DataFrame:
    """Read-only: every dead letter of the dead-letter streams the config points at, one row
    per dead letter (DEAD_LETTER in ``recovery.schemas``, plus ``death_time``, a
    timestamp). Lazy: each action on it reads Redis again."""
    streams, _ = find_dead_letter_streams(settings, redis_params(settings))
    return read_frame(spark, settings, streams)


def run_dead_letters(spark: SparkSession, settings: Settings, summary: DeadLetterSummary
                     ) -> DeadLetterSummary:
    """One dead-letter read: the views written under ``views_path``, tables logged, then,
    with retention on, the letters past a limit trimmed; `summary` filled as it goes.
    Raises RecoveryError subclasses."""
    started = time.monotonic()
    check_report_location(settings.report.path)
    d = settings.dead_letters
    streams, skipped = find_dead_letter_streams(settings, redis_params(settings))
    now = now_ms()
    summary.skipped = skipped
    summary.dead_letter_warnings = warnings_for(streams, d.warn_length, d.warn_oldest_age_s, now)
    out = views_path(settings.report.path, summary.run_id)
    frame = read_frame(spark, settings, streams)
    with spark_errors():
        found = frame.transform(causes()).localCheckpoint(eager=True)
        views = {"by_reason": found.transform(by_reason()),
                 "by_signature": found.transform(by_signature())}
        stamp = with_scheduler_run_id(summary.scheduler_run_id)
        for name, view in views.items():
            view.transform(stamp).coalesce(1).write.mode("overwrite").parquet(f"{out}/{name}")
        if d.write_entries:
            frame.transform(stamp).write.mode("overwrite").parquet(f"{out}/{ENTRIES}")
        rows = {name: [r.asDict() for r in view.collect()] for name, view in views.items()}
        per_key = {r["dead_letter_key"]: (int(r["n"]), int(r["bare"])) for r in
                   found.groupBy("dead_letter_key").agg(
                       F.sum("dead_letters").alias("n"),
                       F.sum("without_metadata").alias("bare")).collect()}
    summary.report_path = out
    summary.retention = apply_retention(  # a failure midway still reports what went
        redis_params(settings), streams, d, lambda report: setattr(summary, "retention", report),
        settings.streams.groups)
    summary.warnings += retention_warnings(summary.retention)
    fill_summary(summary, streams, per_key, rows["by_signature"], d.top_signatures, now)
    log.info("dead letters %s by reason\n%s", summary.run_id,
             fixed_width(rows["by_reason"][:LOGGED_ROWS], REASON_COLUMNS))
    log.info("dead letters %s by error signature\n%s", summary.run_id,
             fixed_width(rows["by_signature"][:LOGGED_ROWS], SIGNATURE_COLUMNS))
    summary.console_links = console_links(settings.dead_letter.console_url,
                                          (s.key for s in streams if s.status == "read"))
    if summary.console_links:
        log.info("dead letters %s in the console\n%s", summary.run_id,
                 "\n".join(link_lines(summary.console_links)))
    summary.duration_s = round(time.monotonic() - started, 3)
    return summary


def fill_summary(summary: DeadLetterSummary, streams: list[DeadLetterStream],
                 per_key: dict[str, tuple[int, int]], signatures: list[dict[str, Any]],
                 top: int, now: int) -> None:
    """Per stream status, totals and the `top` signatures; ``partial`` when keys were
    skipped."""
    for s in streams:
        if s.status in ("wrong-type", DENIED):
            continue  # in `skipped`
        read, bare = per_key.get(s.key, (0, 0))
        summary.streams.append(DeadLetterStreamRead(s.source, s.key, list(s.sources), s.status,
                                                    s.length, s.oldest_age_s(now), read))
        summary.totals["dead_letter_streams"] += 1
        summary.totals[s.status] += 1
        summary.totals["dead_letters"] += read
        summary.totals["without_metadata"] += bare
    summary.top_signatures = [
        DeadLetterSignature(r["signature"], r["dead_letters"], iso_time(r["first_death_time"]),
                            iso_time(r["last_death_time"]), r["example_dead_letter_key"],
                            r["example_dead_letter_id"])
        for r in signatures[:top]]
    if summary.skipped and summary.status == "ok":
        summary.status = "partial"
