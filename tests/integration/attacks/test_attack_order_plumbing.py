"""Attacks on the per-key ordered path's plumbing: the claim task that keys its entries, the
hand-over's report written by the workers' own files (``recovery.report.worker_files``) and
the lease reads' growing XPENDING pages. Each test checks Redis itself (XPENDING) and the
report files on disk, through the job's command line on the suite's session."""

from __future__ import annotations

from pathlib import Path

import pytest

from recovery.report.run_report import run_path
from recovery.report.worker_files import STAGING, SUCCESS
from recovery.testing.backlog import add_entries, create_group, deliver, make_stuck
from tests.support.attack_order_handlers import BYTES_DONE
from tests.support.backlogs import DEAD, HOUR_MS
from tests.support.fault_tools import GROUP, report_rows, run_in_process, write_control
from tests.support.order_handler import DONE, FAIL, VIOLATIONS
from tests.support.order_tools import STREAM, args, pending_owners, recorded, seed

ANY_KEY = "tests.support.attack_order_handlers:any_key"


def _run_dir(reports: Path, run_id: str) -> Path:
    return Path(run_path(str(reports), run_id))


def _reported_once(spark, reports: Path, run_id: str) -> dict[str, str]:
    """ID -> action of the run's committed report; fails on an entry reported twice."""
    rows = report_rows(spark, reports, run_id)
    assert rows is not None, "no report committed"
    ids = [r["id"] for r in rows]
    twice = sorted({i for i in ids if ids.count(i) > 1})
    assert not twice, f"entries reported twice: {twice[:5]}"
    return {r["id"]: r["action"] for r in rows}


@pytest.mark.slow
@pytest.mark.parametrize("fault", ["ordered 1 0", "ordered 2 0", "claim 1 0"])
def test_a_retried_task_reports_every_entry_once_and_leaves_no_staging(
        spark, redis_server, tmp_path: Path, faults, fault: str) -> None:
    """A hand-over (or claim) task fails once after its side effects; the suite's session
    retries it. The committed report must hold every entry exactly once (the failed
    attempt's file never moved in), agree with Redis (nothing reported acked is pending;
    the PEL empty), carry _SUCCESS, and no staging may be left behind."""
    client = redis_server.client()
    write_control(redis_server.url)
    ids = seed(client, keys=3, per_key=4)
    every = sorted(i for key_ids in ids.values() for i in key_ids)
    faults(fault)
    reports = tmp_path / "r"
    result = run_in_process(spark, args(redis_server.url, reports, "spark.partitions=2"))
    assert result.code == 0, result.stderr[-3000:]
    run_id = result.summary["run_id"]
    actions = _reported_once(spark, reports, run_id)
    assert sorted(actions) == every, "entries missing from the report"
    assert pending_owners(client) == {}, "entries left pending"
    done = recorded(client, DONE, sorted(ids))
    for key, key_ids in ids.items():
        assert sorted(set(done[key])) == sorted(key_ids), f"{key} not all handled"
    run_dir = _run_dir(reports, run_id)
    assert (run_dir / SUCCESS).exists()
    assert not (run_dir / STAGING).exists(), "staging left behind"
    assert all(p.name.startswith("part-") for p in run_dir.glob("*.parquet"))


ODD_KEYS = [b"\xff\xfe", b"", b"a\x00b", "é".encode(), b"{x} y:z"]


@pytest.mark.slow
def test_keys_of_odd_bytes_are_ordered_and_reported(spark, redis_server, tmp_path: Path
                                                    ) -> None:
    """Key values that are not UTF-8, empty, hold NUL, braces or spaces, keyed in the claim
    task: each key's head fails, so its later entries must stay pending (held), reported
    held; entries without the key field are reported once each; Redis agrees."""
    client = redis_server.client()
    write_control(redis_server.url)
    create_group(client, STREAM, GROUP)
    keyed = add_entries(client, STREAM, 3 * len(ODD_KEYS),
                        lambda i: {b"k": ODD_KEYS[i % len(ODD_KEYS)], b"n": str(i).encode()})
    keyless = add_entries(client, STREAM, 2, lambda i: {b"n": f"x{i}".encode()})
    every = keyed + keyless
    assert deliver(client, STREAM, GROUP, DEAD, len(every)) == every
    make_stuck(client, STREAM, GROUP, DEAD, every, HOUR_MS)
    heads = keyed[:len(ODD_KEYS)]
    client.sadd(FAIL, *heads)
    reports = tmp_path / "r"
    result = run_in_process(spark, [*args(redis_server.url, reports, "spark.partitions=2"),
                                    "--set", "handler.path=" + ANY_KEY])
    assert result.code == 0, result.stderr[-3000:]
    assert client.lrange(VIOLATIONS, 0, -1) == []
    done = {v.decode() for v in client.lrange(BYTES_DONE, 0, -1)}
    assert done.isdisjoint(keyed), f"entries handed over behind a failed head: {done}"
    pending = set(pending_owners(client))
    assert set(keyed) <= pending
    actions = _reported_once(spark, reports, result.summary["run_id"])
    assert sorted(actions) == sorted(every)
    assert {actions[i] for i in keyed[len(ODD_KEYS):]} == {"held"}
