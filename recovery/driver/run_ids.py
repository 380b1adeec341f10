"""A run ID is used once (docs/GUARANTEES.md, "Run IDs").

A run refuses (exit 2, one line, nothing touched) a given ``--run-id`` that has any trace:
its report partition (checked before Redis is), its claim journal, split cursors or range
lists, or another run's registration. Every real run then registers its ID in Redis
(``recovery.redis_io.run_ids``: SET NX with a TTL) before its first write, so two drivers
started at once with one ID are told apart; the registration is deleted when the run
finishes, and stays (for its TTL) when the run is killed or fails.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from pathlib import Path

import redis
from pyspark.sql import SparkSession
from redis.exceptions import ResponseError

from recovery.driver.discovery import job_consumer
from recovery.errors import ConfigError
from recovery.redis_io.commands import key_exists
from recovery.redis_io.journal import journal_in_redis, journal_key
from recovery.redis_io.redis_conn import RedisConn
from recovery.redis_io.run_ids import (
    TTL_S,
    RunIdTakenError,
    refused,
    register_run,
    registration_key,
    split_traces,
)
from recovery.redis_io.streams import drop_keys
from recovery.report.run_report import hadoop_literal, health_path, run_path
from recovery.report.worker_files import local_directory
from recovery.settings.model import Settings
from recovery.targets.keys import warn

log = logging.getLogger(__name__)
FIX = "omit --run-id for a fresh one, or pick another"
NAME_MAX = 255  # bytes in a file name (Linux, HDFS's default component limit)
ACL_LINE = ("ACL SETUSER <user> ~{prefix}:run:* +set +get +exists +del; docs/ACL.md line 11 "
            "in the project's repository")


def taken(run_id: str, trace: str) -> RunIdTakenError:
    """The refusal of `run_id`, naming its `trace` and the fix."""
    return RunIdTakenError(f"--run-id {run_id} is taken: {trace}: {FIX}")


def refuse_reported_run_id(spark: SparkSession, settings: Settings, run_id: str) -> None:
    """Refuse a given run ID whose report partition (entries or health) exists: a run with
    this ID wrote its report there, and a second would add its rows to that partition. Reads
    the file system only: call it before any Redis write. An ID too long to name the
    partition's directory is refused as well."""
    if len(f"run_id={run_id}".encode("utf-8", "surrogateescape")) > NAME_MAX:
        raise ConfigError(f"--run-id is too long: run_id=<id> names the report partition's "
                          f"directory, at most {NAME_MAX} bytes: pick a shorter one")
    base = settings.report.path
    for path in (run_path(base, run_id), health_path(base, run_id)):
        if _exists(spark, path, run_id):
            raise taken(run_id, f"its report partition {path} exists")


@contextlib.contextmanager
def claimed_partition(settings: Settings, run_id: str) -> Iterator[None]:
    """Make the given run ID's report partition directory, exclusively (a local report
    directory): of two runs with one ID that both passed ``refuse_reported_run_id`` before
    either wrote (a dry run and a real run, or runs on two Redis servers sharing one
    ``report.path``: their registrations are on different servers), the second is refused.
    The directory is removed again when the run leaves it empty (it wrote no report); a
    killed run's stays, and its ID with it."""
    local = local_directory(run_path(settings.report.path, run_id))
    if local is None:  # another file system: no exclusive mkdir; the check alone
        yield
        return
    path = Path(local)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        path.mkdir()
    except FileExistsError:
        raise taken(run_id, f"its report partition {path} exists (another run with this ID "
                    "started at the same time)") from None
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            path.rmdir()  # only an empty one: a run that wrote no report leaves none


def _exists(spark: SparkSession, path: str, run_id: str) -> bool:
    """Whether the directory `path` (ending in run `run_id`'s partition) exists: a local one
    on the disk, another file system's as Spark's reader finds it (a missing path fails its
    analysis; the run ID's glob characters escaped, so that it matches no other run's)."""
    local = local_directory(path)
    if local is not None:
        return Path(local).exists()
    literal = path[:len(path) - len(run_id)] + hadoop_literal(run_id)
    try:
        spark.read.format("text").load(literal).schema  # noqa: B018 (analysis lists the path)
    except Exception:
        return False
    return True


def refuse_traced_run_id(conn: RedisConn, settings: Settings, run_id: str) -> None:
    """Refuse a given run ID that left a trace in Redis: its claim journal (part 0's,
    journaled by every run that claimed on a master that may retry tasks), a split cursor
    or range list (one SCAN of the keyspace), or a registration. Reads only."""
    client = conn.client
    with conn.errors():
        prefix = settings.claim.journal_prefix
        if prefix:
            key = journal_key(prefix, job_consumer(settings.claim.consumer_prefix, run_id, 0))
            if journal_in_redis(client, key):
                raise taken(run_id, f"a run with this ID left its claim journal {key} in Redis "
                            "(killed, or still running)")
        for key in split_traces(client, run_id):
            raise taken(run_id, f"a run with this ID left its split cursor or range list {key} "
                        "in Redis (killed, or still running)")
        key = registration_key(settings.claim.consumer_prefix, run_id)
        if _exists_unless_refused(client, key):
            raise taken(run_id, f"a run with this ID registered it in Redis ({key}: killed, "
                        "failed, or still running)")


def _exists_unless_refused(client: redis.Redis, key: str) -> bool:
    """EXISTS `key`; False when the ACL user may not (it cannot register either: the
    registration step says so)."""
    try:
        return key_exists(client, key)
    except ResponseError as exc:
        if refused(exc):
            return False
        raise


@contextlib.contextmanager
def registered_run(conn: RedisConn, settings: Settings, run_id: str, given: bool,
                   warnings: list[str]) -> Iterator[None]:
    """Register `run_id` for the run's duration (SET NX with a TTL): refused when another run
    holds it (two drivers started at once with one `given` ID). A user whose ACL may not
    write the key runs unregistered: with a `given` ID, a WARNING (into `warnings`) says that
    only the other traces were checked. The key is deleted when the run finishes (not when
    it raises: a failed run's ID stays used until the key expires)."""
    key = registration_key(settings.claim.consumer_prefix, run_id)
    with conn.errors():
        got = register_run(conn.client, key, run_id)
    if got is False:
        raise taken(run_id, f"another run holds its registration {key} in Redis (started at "
                    "the same time, or killed)")
    if got is not True:
        message = (f"run {run_id}: its ID cannot be registered in Redis ({got}): only its "
                   "report, journal and split keys were checked, so two runs started at once "
                   "with this --run-id would not be told apart; grant the key ("
                   f"{ACL_LINE.format(prefix=settings.claim.consumer_prefix)})")
        if given:
            warn(warnings, message)
        else:
            log.info("%s", message)
    yield
    if got is True:
        drop_keys(conn.client, [key], "run registration", TTL_S)

