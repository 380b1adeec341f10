"""The recovery run, orchestrated on the driver.

1. validate settings and handler, check the server, discover and spread the units;
2. claim on executors and materialise the claimed set exactly once (eager local checkpoint);
3. read the job consumers' PEL (delivery counts), join, route;
4. dead-letter, handle and ack on executors while writing the per-entry report;
5. read the report back, sum it up, remove the job's empty consumers.
"""

from __future__ import annotations

import contextlib
import logging
import re
import secrets
import time
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession

from recovery import errors
from recovery.config import JobParams, Settings, executor_params
from recovery.discovery import (
    assign,
    check_server,
    discover,
    remove_empty_job_consumers,
)
from recovery.errors import ConfigError, RecoveryError
from recovery.handlers import load_handler
from recovery.partitions import apply_partition, claim_partition, pending_partition
from recovery.redis_conn import connect
from recovery.report import (
    RunSummary,
    fill_summary,
    format_table,
    run_path,
    summarise_run,
    write_report,
)
from recovery.schemas import CLAIMED, PENDING, REPORT, UNIT
from recovery.transforms import join_pending, route

log = logging.getLogger(__name__)
TYPED_ERROR = re.compile(r"recovery\.errors\.(\w+): ([^\n]+)")
PYTHON_ERROR = re.compile(r"^[\w.]+(?:Error|Exception|Fault): [^\n]+", re.MULTILINE)


def new_run_id() -> str:
    """A sortable, unique run id: UTC time plus 6 hex digits."""
    return datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ") + "-" + secrets.token_hex(3)


def run(spark: SparkSession, settings: Settings, run_id: str | None = None) -> RunSummary:
    """One recovery run. Raises RecoveryError subclasses for what it cannot do."""
    started = time.monotonic()
    params = executor_params(settings, run_id or new_run_id())
    load_handler(settings.handler.path)
    _check_report_location(settings.report.path)
    client = connect(params.redis)
    try:
        check_server(client, params.redis)
        units, skipped = discover(client, settings, params.redis)
        summary = RunSummary(params.run_id, report_path=run_path(settings.report.path,
                                                                 params.run_id))
        log.info("run %s: %d units with pending entries, %d skipped", params.run_id,
                 len(units), len(skipped))
        if units:
            with spark_errors():
                _recover(spark, settings, params, units)
                fill_summary(summary, summarise_run(spark, settings.report.path, params.run_id),
                             skipped)
            remove_empty_job_consumers(client, units, settings.claim.consumer_prefix,
                                       params.redis)
        else:
            fill_summary(summary, spark.createDataFrame([], "stream string"), skipped)
            summary.report_path = None
    finally:
        client.close()
    summary.duration_s = round(time.monotonic() - started, 3)
    log.info("run %s summary\n%s", params.run_id, format_table(summary))
    return summary


def _recover(spark: SparkSession, settings: Settings, params: JobParams, units: list) -> None:
    parts = assign(units, settings.spark.partitions, settings.claim.consumer_prefix,
                   params.run_id)
    n = max(a.part for a in parts) + 1
    spark.conf.set("spark.sql.shuffle.partitions", str(n))
    unit_df = spark.createDataFrame([tuple(vars(a).values()) for a in parts], UNIT)
    unit_df = unit_df.repartitionByRange(n, "part")
    started = time.monotonic()
    claimed = materialise_once(unit_df.mapInArrow(claim_partition(params), CLAIMED))
    log.info("run %s: claim done in %.1f s", params.run_id, time.monotonic() - started)
    # Partition the PEL side by unit and let the join reuse that: the claimed side is then
    # shuffled by (stream, group) only, so each unit reaches the apply stage in one task,
    # contiguous and in ID order (cheap ranged ownership checks in the ack script).
    spark.conf.set("spark.sql.requireAllClusterKeysForCoPartition", "false")
    pending = unit_df.mapInArrow(pending_partition(params), PENDING).repartition(
        n, "stream", "group")
    routed = claimed.transform(join_pending(pending)).transform(
        route(settings.claim.max_deliveries))
    report = routed.mapInArrow(apply_partition(params), REPORT)
    started = time.monotonic()
    write_report(report, settings.report.path, params.run_id)
    log.info("run %s: dead-letter, handler, acks and report done in %.1f s", params.run_id,
             time.monotonic() - started)


def materialise_once(claimed: DataFrame) -> DataFrame:
    """Run the claim now, exactly once, and keep its output: later actions read the
    checkpoint instead of claiming again (a re-run claim would see its own entries as fresh
    and skip them)."""
    return claimed.localCheckpoint(eager=True)


@contextlib.contextmanager
def spark_errors() -> Iterator[None]:
    """Turn a failed Spark action back into the typed error raised on the executor."""
    try:
        yield
    except RecoveryError:
        raise
    except Exception as exc:
        raise from_spark_error(exc) from None


def from_spark_error(exc: Exception) -> RecoveryError:
    """The executor's RecoveryError, if the Spark error carries one; else a generic one."""
    text = str(exc)
    match = TYPED_ERROR.search(text)
    if match:
        cls = getattr(errors, match.group(1), RecoveryError)
        if isinstance(cls, type) and issubclass(cls, RecoveryError):
            return cls(match.group(2).strip())
    cause = PYTHON_ERROR.search(text)
    first = next((line.strip() for line in text.splitlines() if line.strip()), type(exc).__name__)
    detail = cause.group(0).strip() if cause else first
    return RecoveryError(f"the Spark job failed: {detail[:500]}")


def _check_report_location(path: str) -> None:
    """Fail early (exit 2) when a local report directory cannot be written."""
    if "://" in path and not path.startswith("file://"):
        return  # remote file systems are checked by the write itself
    local = Path(path.removeprefix("file://"))
    probe = local
    while not probe.exists():
        probe = probe.parent
    if not probe.is_dir() or not _writable(probe):
        raise ConfigError(
            f"report.path {path}: {probe} is not a writable directory; "
            "point report.path at a directory the job may write"
        )


def _writable(directory: Path) -> bool:
    try:
        with open(directory / f".recovery-probe-{secrets.token_hex(4)}", "w") as fh:
            Path(fh.name).unlink()
        return True
    except OSError:
        return False
