"""The benchmark harness end to end at a tiny size, so it cannot rot (no Spark, a few seconds).

Timings are what the harness prints; they are never asserted here.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from recovery.dlq_names import dead_letter_key
from recovery.local_redis import LocalServer
from tests.benchmark.loops import DLQ_SUFFIX, run_loop
from tests.benchmark.run import main
from tests.benchmark.seed import BacklogSpec, seed_backlog
from tests.benchmark.verify import VerificationError, verify_recovered

SPEC = BacklogSpec(streams=3, per_stream=200)  # 5% over the limit: 10 per stream


def test_harness_runs_both_loops_and_verifies_them(tmp_path: Path) -> None:
    out, raw_json = tmp_path / "results.md", tmp_path / "results.json"
    code = main(["--sizes", "3x200", "--repeats", "1", "--contenders", "naive,raw",
                 "--idle-probe-s", "0.1", "--out", str(out), "--json", str(raw_json)])

    assert code == 0
    records = json.loads(raw_json.read_text())["records"]
    assert sorted((r["contender"], r["acked"], r["dead_lettered"]) for r in records) == [
        ("naive", 570, 30), ("raw", 570, 30)]
    assert all(r["round_trips"] > 0 and r["redis_commands"] > 0 for r in records)
    table = out.read_text()
    assert "| naive | 3x200 | 1 |" in table
    assert "| raw | 3x200 | 1 |" in table


def test_verification_fails_on_pending_and_doubled_entries(redis_server: LocalServer) -> None:
    client = redis_server.client()
    seeded = seed_backlog(client, SPEC)
    assert sum(len(ids) for ids in seeded.over_limit.values()) == 30
    with pytest.raises(VerificationError, match="still pending"):
        verify_recovered(client, seeded)

    tally = run_loop("raw", SPEC, redis_server.url)
    assert (tally.acked, tally.dead_lettered) == (570, 30)
    assert verify_recovered(client, seeded).dead_lettered == 30

    stream = SPEC.stream_names()[0]
    dlq = dead_letter_key(stream, DLQ_SUFFIX)
    [(_, first)] = client.xrange(dlq, count=1)  # type: ignore[misc]
    client.xadd(dlq, first)  # type: ignore[arg-type]  # the same entry dead-lettered twice
    with pytest.raises(VerificationError, match="dead-lettered 2 times"):
        verify_recovered(client, seeded)
