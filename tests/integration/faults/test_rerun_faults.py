"""Reruns after a SIGKILL (issue 60, part 4): a killed split run's ID given again is refused,
Redis untouched; a rerun with a new ID finishes the work, each entry handed over exactly
once in that rerun.

The killed run takes the retry-safe split path: ``local[2,2]`` (tasks may be retried), the
claim journal off (``claim.journal_prefix = ""``: nothing to find there, so the journal
check cannot be what refuses), each stream split over two parts through a shared cursor.
The kill counts only if it landed mid-claim: the job died of that SIGKILL (exit -9) with
entries claimed by its consumers, others still on the dead consumer, its split cursor and
range lists in Redis, nothing handed over or dead-lettered yet; else the test fails.
Used by ``recovery.driver.run_ids`` (the refusal) and ``recovery.redis_io.split_cursors``.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from redis import Redis

from tests.support.backlogs import DEAD
from tests.support.fault_tools import (
    KINDS,
    REJECTED_KIND,
    SPLIT,
    handed_over,
    job_args,
    job_consumers,
    job_owned,
    kill_landed,
    kill_tree,
    owned_by,
    report_rows,
    rows_by_key,
    run_in_process,
    seed_kinds,
    spark_submit,
    wait_until,
    write_control,
)
from tests.support.handlers import HANDLED
from tests.support.invariants import final_states

pytestmark = pytest.mark.slow  # a spark-submit run killed, two in-process runs

KILLED, FRESH = "KA", "KB"
STREAMS = ["ka", "kb{t}"]
SPLIT_PATH = (*SPLIT, "claim.journal_prefix=", "claim.min_idle_ms=1000")
SLOW = ("claim.max_entries_per_s=20", "handler.batch_size=4")
SMALL_BATCHES = "spark.sql.execution.arrow.maxRecordsPerBatch=20"


def snapshot(client: Redis) -> dict[bytes, bytes]:
    """Every key and its DUMP (a stream's with its PEL: owners, counts, delivery times)."""
    return {k: client.dump(k) for k in client.scan_iter(count=1000)}


def split_keys_of(client: Redis, run_id: str) -> list[bytes]:
    """The split cursors and range lists of `run_id` in Redis."""
    return sorted(client.scan_iter(match=f"*:recovery-split:{run_id}:*", count=1000))


def kill_mid_claim(client: Redis, base: Path) -> None:
    """Start the split run KILLED under spark-submit and SIGKILL it once its consumers hold
    20 entries; fails unless the kill landed mid-claim (module doc)."""
    write_control(_url(client), delay_s=0.12)
    proc = spark_submit(job_args(_url(client), base, STREAMS, *SPLIT_PATH, *SLOW,
                                 run_id=KILLED), base / "logs", SMALL_BATCHES,
                        master="local[2,2]")
    try:
        reached = wait_until(lambda: job_owned(client, STREAMS, KILLED) >= 20, proc, 240,
                             "20 entries claimed")
        landed = kill_landed(proc)
    finally:
        if proc.poll() is None:
            kill_tree(proc)
    write_control(_url(client), delay_s=0)
    assert reached and landed, (reached, landed, proc.returncode)
    assert owned_by(client, STREAMS, DEAD) > 0, "the kill came after the claim: no work left"
    assert len(split_keys_of(client, KILLED)) >= 2, "the killed run did not split its streams"
    assert client.hlen(HANDLED) == 0, "the kill came after the first hand-over"


def _url(client: Redis) -> str:
    kwargs = client.connection_pool.connection_kwargs
    return f"redis://{kwargs['host']}:{kwargs['port']}/0"


@pytest.mark.timeout(600)
def test_a_killed_split_runs_id_is_refused_and_a_new_id_finishes_the_work(
        spark, redis_server, tmp_path):
    client = redis_server.client()
    client.delete(HANDLED)
    seeded = seed_kinds(client, STREAMS, {**KINDS, **REJECTED_KIND})
    base = tmp_path / "reports"
    kill_mid_claim(client, base)
    time.sleep(1.1)  # the killed run's claims are idle for min_idle_ms: a rerun may take them

    before = snapshot(client)
    same = run_in_process(spark, job_args(redis_server.url, base, STREAMS, *SPLIT_PATH,
                                          run_id=KILLED))
    assert same.code == 2, same.stderr[-3000:]
    (line,) = same.error_lines()
    assert f"--run-id {KILLED} is taken" in line and "omit --run-id" in line, line
    assert snapshot(client) == before, "the refused run touched Redis"
    assert report_rows(spark, base, KILLED) is None

    fresh = run_in_process(spark, job_args(redis_server.url, base, STREAMS, *SPLIT_PATH,
                                           run_id=FRESH))
    assert fresh.code == 0, fresh.stderr[-3000:]
    handed = handed_over(client)
    assert all(n == 1 for n in handed.values()), {k: n for k, n in handed.items() if n > 1}
    rows = rows_by_key(report_rows(spark, base, FRESH) or [])
    assert all(len(r) == 1 for r in rows.values()), "an entry reported twice"
    states = final_states(client, seeded)
    for key, kind in seeded.items():
        action = rows[key][0]["action"] if key in rows else None
        if kind == "deleted":  # the killed run's claim may have dropped it (7.0): unreported
            assert states[key] == "acked" and handed[key] == 0, (key, states[key])
            continue
        assert action is not None, (key, kind, "not reported by the rerun")
        if kind == "ok":
            assert (states[key], action, handed[key]) == ("acked", "reprocessed", 1), key
        elif kind == "fail":
            assert states[key].startswith(f"pending:recovery-{FRESH}-"), (key, states[key])
            assert (action, handed[key]) == ("failed", 1), key
        elif kind == "rejected":
            assert (states[key], action, handed[key]) == ("dead_lettered", "dead_lettered",
                                                          1), key
        else:  # poison, fail_at_limit (over the limit once the killed run's claim counted)
            assert (states[key], action) == ("dead_lettered", "dead_lettered"), key
            assert handed[key] <= (kind == "fail_at_limit"), key
    for stream in STREAMS:
        assert not [c for c in job_consumers(client, stream) if KILLED in c], \
            "the killed run's emptied consumers are removed by the rerun"
    assert split_keys_of(client, FRESH) == [], "the rerun left its own split keys"
    assert client.keys(f"recovery:run:{FRESH}") == [], "the rerun left its registration"
    assert client.ttl(f"recovery:run:{KILLED}") > 0, "a killed run's registration must expire"
    assert all(client.pttl(k) > 0 for k in split_keys_of(client, KILLED)), \
        "a killed run's split keys must expire"
