"""Plans on the driver: the manifest every run writes beside its report, and ``--plan``,
which applies a dry run's report exactly (``recovery.executor.claim.by_plan`` claims by ID).

The manifest, ``<run's report directory>/_plan.json`` (``_``: Parquet readers skip it), holds
no credentials: whether the run was a dry run, its run id, when it started (epoch ms), the
claim settings it routed with (``min_idle_ms``, ``max_deliveries``, ``reprocess_mode``,
``delete_acked``) and the identity of the server it read (``server_identity``).

A plan is refused (``PlanError``, exit 2, before anything is written to Redis) when its
directory or manifest is missing or cannot be read, it holds no entries, it comes from a
real run, it is older than ``plan.max_age_s``, it was made on another server, with
another ``reprocess.mode`` or ``reprocess.delete_acked`` than the run's, or with a
``min_idle_ms`` not longer than ``handler.timeout_s`` by more than ``LEASE_FRESH_S`` (the
lease would not outlast a handler call); or when the run has a backoff schedule
(``claim.backoff_factor``), which a claim by ID does not follow.
"""

from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import asdict, dataclass, field, replace
from typing import Any
from urllib.parse import urlsplit

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from redis.cluster import RedisCluster

from recovery.driver.discovery import WorkUnit
from recovery.errors import ConfigError, DeadLetterNameError, StreamUnitError
from recovery.executor.handover.modes import mode_of
from recovery.params import JobParams, Unit
from recovery.redis_io.cluster import node_of
from recovery.redis_io.commands import server_run_ids, stream_groups
from recovery.redis_io.redis_conn import RedisConn
from recovery.redis_io.scripts import LEASE_FRESH_S, handler_outlasts_lease
from recovery.redis_io.streams import info_rows
from recovery.report.run_report import read_run_dir
from recovery.report.worker_files import local_directory
from recovery.rows import Skipped
from recovery.schemas import PLANNED
from recovery.settings.model import Settings
from recovery.settings.redis import strip_userinfo

log = logging.getLogger(__name__)
MANIFEST = "_plan.json"
KIND = "redis-stream-recovery plan"


class PlanError(ConfigError):
    """A ``--plan`` that cannot be applied (exit 2; nothing was touched)."""


@dataclass(frozen=True)
class Manifest:
    """What a run's ``_plan.json`` holds (times: epoch ms, ms)."""

    run_id: str
    dry_run: bool
    created_at_ms: int
    min_idle_ms: int
    max_deliveries: int
    reprocess_mode: str
    server: dict[str, Any] = field(default_factory=dict)
    backoff_factor: float | None = None  # the dry run's schedule (claim.backoff_factor)
    backoff_max_ms: int | None = None
    delete_acked: bool = False  # reprocess.delete_acked (absent from older manifests: off)
    kind: str = KIND
    version: int = 1


def server_identity(conn: RedisConn) -> dict[str, Any]:
    """Which server (and database) a run read: its address without credentials (for the
    message only), the database, cluster or not, and ``ids``: INFO server ``run_id`` of the
    server, or of each primary of a cluster (random, new at every start of the process)."""
    db = urlsplit(conn.params.url).path.strip("/")
    cluster = isinstance(conn.client, RedisCluster)
    with conn.errors():
        ids = server_run_ids(conn.client)
    return {"address": strip_userinfo(conn.params.url), "db": int(db or 0), "cluster": cluster,
            "ids": ids}


def same_server(planned: dict[str, Any], now: dict[str, Any]) -> bool:
    """Whether two identities name the same server and database: the same database, both
    cluster or not, and a server run ID in common. A restarted standalone server has a new
    run ID (its data may be older or gone: a plan of it is refused); a cluster passes while
    one primary of the plan's still runs (failovers and restarts of the others)."""
    return (planned.get("db") == now["db"] and planned.get("cluster") == now["cluster"]
            and bool(set(planned.get("ids") or ()) & set(now["ids"])))


def new_manifest(params: JobParams, dry_run: bool, started_ms: int,
                 server: dict[str, Any]) -> Manifest:
    """The manifest of a run that started at `started_ms` (epoch ms) on `server`."""
    return Manifest(params.run_id, dry_run, started_ms, params.min_idle_ms,
                    params.max_deliveries, params.reprocess_mode, server,
                    params.backoff_factor, params.backoff_max_ms, params.delete_acked)


def write_manifest(spark: SparkSession, run_dir: str, manifest: Manifest) -> None:
    """Write `manifest` into a run's report directory: a local one directly (written whole,
    then renamed), another file system through Spark (a text directory of that name)."""
    text = json.dumps(asdict(manifest), sort_keys=True)
    local = local_directory(run_dir)
    if local is None:
        spark.createDataFrame([(text,)], "value string").coalesce(1).write.mode(
            "overwrite").text(f"{run_dir.rstrip('/')}/{MANIFEST}")
        return
    local.mkdir(parents=True, exist_ok=True)
    part = local / f"{MANIFEST}.{os.getpid()}"
    part.write_text(text + "\n", encoding="utf-8")
    part.rename(local / MANIFEST)


def read_manifest(plan_dir: str, spark: SparkSession | None) -> Manifest | None:
    """The manifest of `plan_dir`; None when it is on another file system and no session is
    given. PlanError when it is missing or not a manifest."""
    local = local_directory(plan_dir)
    try:
        if local is not None:
            if not local.is_dir():
                raise PlanError(_refusal(plan_dir, "no such directory"))
            text = (local / MANIFEST).read_text(encoding="utf-8")
        elif spark is None:
            return None
        else:
            text = "\n".join(r.value for r in spark.read.text(f"{plan_dir.rstrip('/')}/{MANIFEST}")
                             .collect())
        data = json.loads(text)
        if data.pop("kind", None) != KIND:
            raise ValueError("not a plan manifest")
        return Manifest(**data)
    except PlanError:
        raise
    except FileNotFoundError:
        raise PlanError(_refusal(plan_dir, f"it holds no {MANIFEST} (not a run's report "
                                 "directory, or written before plans existed)")) from None
    except Exception as exc:  # unreadable, not JSON, fields missing or unknown
        raise PlanError(_refusal(plan_dir, f"its {MANIFEST} cannot be read "
                                 f"({type(exc).__name__}: {str(exc)[:200]})")) from None


def check_plan(plan_dir: str, manifest: Manifest, settings: Settings,
               server: dict[str, Any] | None, now_ms: int | None = None) -> None:
    """Refuse (PlanError) a plan that is not a dry run's, is too old, was made on another
    server (``same_server``), has a min_idle_ms a handler call may outlast, or was made with
    another reprocess.mode. `server`: ``server_identity`` now (None: the server is not
    checked, as before Redis is contacted); `now_ms`: epoch ms."""
    if not manifest.dry_run:
        raise PlanError(_refusal(plan_dir, f"it is the report of a real run ({manifest.run_id}), "
                                 "not of a dry run"))
    age_s = ((now_ms if now_ms is not None else int(time.time() * 1000))
             - manifest.created_at_ms) / 1000
    if age_s > settings.plan.max_age_s:
        raise PlanError(_refusal(plan_dir, f"it is {age_s:.0f} s old, older than "
                                 f"plan.max_age_s = {settings.plan.max_age_s}", "or raise "
                                 "plan.max_age_s"))
    if server is not None and not same_server(manifest.server, server):
        where = manifest.server.get("address", "an unknown server")
        raise PlanError(_refusal(plan_dir, f"it was made on another server ({where}, database "
                                 f"{manifest.server.get('db')}; or the same one since "
                                 f"restarted) than redis.url ({server['address']}, database "
                                 f"{server['db']})"))
    timeout_s = settings.handler.timeout_s
    if handler_outlasts_lease(manifest.min_idle_ms, timeout_s):
        raise PlanError(_refusal(plan_dir, f"its min_idle_ms ({manifest.min_idle_ms} ms), which "
                                 f"this run claims and leases with, is not longer than "
                                 f"handler.timeout_s ({timeout_s:g} s) by more than "
                                 f"{LEASE_FRESH_S * 1000:g} ms", "or lower handler.timeout_s"))
    factor = settings.claim.backoff_factor
    if factor is not None and factor > 1:
        raise PlanError(_refusal(plan_dir, f"this run has a backoff schedule (claim.backoff_factor "
                                 f"= {factor:g}), which a plan's claim by ID does not follow "
                                 "(the plan holds the entries due when it was made)", "or "
                                 "apply it without one: --set claim.backoff_factor=1"))
    if manifest.reprocess_mode != settings.reprocess.mode:
        raise PlanError(_refusal(plan_dir, f"it was made with reprocess.mode = "
                                 f"{manifest.reprocess_mode}, this run has "
                                 f"{settings.reprocess.mode}", "or set reprocess.mode = "
                                 f"{manifest.reprocess_mode}"))
    if manifest.delete_acked != settings.reprocess.delete_acked:
        raise PlanError(_refusal(plan_dir, f"it was made with reprocess.delete_acked = "
                                 f"{str(manifest.delete_acked).lower()}, this run has "
                                 f"{str(settings.reprocess.delete_acked).lower()} (whether "
                                 "the entries it re-processes leave their streams)", "or set "
                                 f"reprocess.delete_acked = {str(manifest.delete_acked).lower()}"))


def _refusal(plan_dir: str, problem: str, alternative: str = "") -> str:
    fix = "make a new dry run (--dry-run) and pass its report directory " \
          "(<report.path>/entries/run_id=<its run id>)"
    return f"--plan {plan_dir}: {problem}: {fix}" + (f", {alternative}" if alternative else "")


def plan_units(spark: SparkSession, conn: RedisConn, settings: Settings, plan_dir: str
               ) -> tuple[list[WorkUnit], list[Skipped]]:
    """The plan's (stream, group) units, each with its planned entries as `pending` (the
    weight for spreading them) and the group's lag as XINFO GROUPS tells it now (None where
    the server cannot tell, as in discovery), and those skipped: stream or group gone since
    the plan."""
    try:
        counts = read_run_dir(spark, plan_dir).groupBy("stream", "group").count().collect()
    except Exception as exc:
        raise PlanError(_refusal(plan_dir, "its report files cannot be read "
                                 f"({str(exc).splitlines()[0][:200]})")) from None
    if not counts:
        raise PlanError(_refusal(plan_dir, "it holds no entries"))
    by_stream: dict[str, dict[str, int]] = {}
    for row in counts:
        by_stream.setdefault(row["stream"], {})[row["group"]] = int(row["count"])
    streams = sorted(by_stream)
    with conn.errors():
        replies = stream_groups(conn.client, streams)
    units: list[WorkUnit] = []
    skipped: list[Skipped] = []
    for stream, reply in zip(streams, replies, strict=True):
        try:
            settings.dead_letter.names.check_source(stream)
            mode_of(settings.reprocess.mode).check_source(stream, settings.reprocess.options())
            rows = info_rows(conn.checked(reply, stream))  # type: ignore[arg-type]
            names = [g["name"] for g in rows]
            lags = {g["name"]: None if g.get("lag") is None else int(g["lag"])  # type: ignore[call-overload]
                    for g in rows}
        except (StreamUnitError, DeadLetterNameError) as exc:
            skipped.append(Skipped(stream, None, f"{exc} (since the plan)"))
            continue
        mode_of(settings.reprocess.mode).check_stream(stream, [str(n) for n in names],
                                                      settings.reprocess.options())
        for group, planned in sorted(by_stream[stream].items()):
            if group in names:
                units.append(WorkUnit(stream, group, planned, node_of(conn.client, stream),
                                      lags[group]))  # the health's lag, as a dry run shows
            else:
                skipped.append(Skipped(stream, group, "no such consumer group (deleted since "
                                       "the plan): its planned entries are left alone"))
    check_plan_units(conn, settings, [(u.stream, u.group) for u in units])
    return units, skipped


def check_plan_units(conn: RedisConn, settings: Settings, pairs: list[tuple[str, str]]) -> None:
    """The mode's refusal of the plan's (stream, group) `pairs` together, as discovery's in
    a plain run: by their names under this run's settings (``check_units``: a plan applied
    with another ``reprocess.requeue_stream`` or ``dead_letter.stream`` than its dry run's),
    then by what Redis holds now (``check_targets``: groups added since the plan)."""
    mode = mode_of(settings.reprocess.mode)
    mode.check_units(pairs, settings.dead_letter.names, settings.reprocess.options())
    mode.check_targets(conn, pairs, settings.reprocess.options())


def planned_frame(spark: SparkSession, plan_dir: str, parts: list[tuple[Unit, int]],
                  n: int) -> DataFrame:
    """PLANNED rows of the plan's entries: part p's units' entries in Spark partition p
    (of `n`), sorted by stream, group and ID. Each part gets a routing key that Spark's
    hash partitioning sends to partition p (``route_keys``), so the plan is shuffled once,
    by the executors, and the driver never holds its entries."""
    keys = route_keys(spark, n)
    units = spark.createDataFrame(
        [(u.stream, u.group, u.consumer, keys[p]) for u, p in parts],
        "stream string, group string, consumer string, route long")
    seq = F.split(F.col("id"), "-")
    return (read_run_dir(spark, plan_dir).select("stream", "group", "id", "delivery_count")
            .join(F.broadcast(units), ["stream", "group"])
            .repartition(n, "route")
            .sortWithinPartitions("stream", "group", seq[0].cast("long"), seq[1].cast("long"))
            .select(*PLANNED.fieldNames()))


def route_keys(spark: SparkSession, n: int) -> dict[int, int]:
    """For each partition p < `n`, a long whose ``pmod(hash(key), n)`` (Spark's hash
    partitioning of a long column) is p: found by Spark itself, among the first longs."""
    size = 16 * n
    while True:
        rows = (spark.range(0, size).select("id", F.expr(f"pmod(hash(id), {n})").alias("p"))
                .groupBy("p").agg(F.min("id").alias("key")).collect())
        keys = {int(r["p"]): int(r["key"]) for r in rows}
        if len(keys) == n:
            return keys
        size *= 4


def planned_params(params: JobParams, manifest: Manifest) -> JobParams:
    """The run's executor parameters with the plan's idle threshold (XCLAIM's guard) and
    delivery limit, claiming by ID."""
    log.info("run %s applies the plan of dry run %s (made %s ms ago): claim.min_idle_ms %d "
             "and claim.max_deliveries %d are the plan's", params.run_id, manifest.run_id,
             int(time.time() * 1000) - manifest.created_at_ms, manifest.min_idle_ms,
             manifest.max_deliveries)
    return replace(params, min_idle_ms=manifest.min_idle_ms,
                   max_deliveries=manifest.max_deliveries, planned=True)


def local_plan_refusal(plan_dir: str, settings: Settings, conn: RedisConn | None) -> None:
    """Before Spark starts: refuse a plan whose local manifest already says no. Without a
    `conn` (before Redis is contacted) every term but the server's is checked."""
    manifest = read_manifest(plan_dir, None)
    if manifest is not None:
        server = server_identity(conn) if conn else None
        check_plan(plan_dir, manifest, settings, server)
