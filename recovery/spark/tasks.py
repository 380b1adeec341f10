"""How Spark runs the job's tasks: whether it may run one more than once, speculation
refused, a session setting for the length of a block, and a DataFrame computed exactly once."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator

from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession

from recovery.errors import ConfigError

LOCAL_MASTER = re.compile(r"local(?:\[[^,\]]+(?:,\s*(\d+))?\])?")  # local, local[N], local[N,F]


def retries_tasks(master: str) -> bool:
    """Whether Spark may run a task of this job more than once: yes, except in ``local``,
    ``local[N]`` and ``local[N,1]``, where a failed task fails the job. On a cluster even
    ``spark.task.maxFailures=1`` does not rule it out: a task lost with its executor
    (decommissioned, preempted) runs again without counting as a failure."""
    local = LOCAL_MASTER.fullmatch(master.strip())
    return local is None or int(local.group(1) or 1) > 1


@contextlib.contextmanager
def session_conf(spark: SparkSession, conf: dict[str, str]) -> Iterator[None]:
    """Set `conf` in the session for the duration, then restore what was there (a shared
    session, such as a notebook's, keeps its own settings)."""
    before = {key: spark.conf.get(key, None) for key in conf}
    for key, value in conf.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, old in before.items():
            if old is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, old)


def materialise_once(claimed: DataFrame) -> DataFrame:
    """Run the claim now, exactly once, and keep its output: later actions read the
    checkpoint instead of claiming again (a re-run claim would see its own entries as fresh
    and skip them). On disk, not in memory: a backlog may be far bigger than the executors'
    memory, and the hand-over streams it back batch by batch."""
    return claimed.localCheckpoint(eager=True, storageLevel=StorageLevel.DISK_ONLY)


def check_no_speculation(value: str | None) -> None:
    """Refuse speculative execution (exit 2): it runs a claim or hand-over task twice at once,
    which would claim entries the kept attempt never sees (left pending until the next run)
    and hand entries to the handler twice."""
    if str(value).strip().lower() == "true":
        raise ConfigError(
            "spark.speculation is true: this job's tasks claim and ack in Redis and must not "
            "run twice at once; submit it with --conf spark.speculation=false"
        )
