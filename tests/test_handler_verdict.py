"""A handler that can say "never retry this" (recovery.handlers.Result.dead_letter, handled by
recovery.executor.handover.modes.handler): the entry is dead-lettered in this run, on its
first delivery, with ``x-death-reason`` ``handler-rejected`` and the handler's error, through
the same atomic move as the delivery limit's; the report, the summary, the dead-letter job's
reasons and the redrive's reason filter know it. Checked in Redis on every server flavor."""

from __future__ import annotations

import io
from contextlib import redirect_stdout
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from recovery.cli.redrive import redrive_main
from recovery.handlers import Result, normalise_reply
from recovery.report.run_report import read_run
from recovery.testing.backlog import add_entries, create_group, deliver, make_stuck
from recovery.testing.local_redis import LocalServer
from tests.support.fault_tools import GROUP, job_args, run_in_process
from tests.support.invariants import pel

HOUR_MS = 3_600_000
VERDICTS = ["ok", "reject", "fail", "ok", "reject", "ok"]


def test_a_final_failure_is_kept_through_the_reply_checks() -> None:
    reply = normalise_reply([Result.dead_letter("x" * 10_000), Result.failure("y"), True], 3)
    assert [(r.ok, r.final) for r in reply] == [(False, True), (False, False), (True, False)]
    assert len(reply[0].error or "") < 10_000  # clipped, still final


@pytest.mark.slow
def test_a_rejected_entry_is_dead_lettered_at_once(spark: SparkSession, server: LocalServer,
                                                   tmp_path: Path) -> None:
    client = server.client()
    create_group(client, "orders", GROUP)
    ids = add_entries(client, "orders", len(VERDICTS),
                      lambda i: {"n": str(i), "verdict": VERDICTS[i]})
    deliver(client, "orders", GROUP, "crashed", len(ids))
    make_stuck(client, "orders", GROUP, "crashed", ids, HOUR_MS)  # delivered once
    args = job_args(server.url, tmp_path / "reports", ["orders"],
                    "handler.path=tests.support.handlers:verdicts")
    result = run_in_process(spark, args)
    assert result.code == 0, result.stderr
    totals = result.summary["totals"]
    assert (totals["reprocessed"], totals["dead_lettered"], totals["failed"]) == (3, 2, 1)

    rejected = [ids[i] for i, v in enumerate(VERDICTS) if v == "reject"]
    letters = client.xrange("{orders}:dlq")
    assert sorted(f[b"x-original-id"].decode() for _, f in letters) == sorted(rejected)
    for _, fields in letters:
        assert fields[b"x-death-reason"] == b"handler-rejected"
        n = fields[b"n"].decode()
        assert fields[b"x-exception-message"] == f"customer {n} no longer exists".encode()
        assert fields[b"x-delivery-count"] == b"2"  # the job's claim was its second delivery
    assert list(pel(client, "orders", GROUP)) == [ids[VERDICTS.index("fail")]]

    rows = read_run(spark, str(tmp_path / "reports"), result.summary["run_id"]).collect()
    dead = {r["id"]: r for r in rows if r["action"] == "dead_lettered"}
    assert set(dead) == set(rejected)
    assert {r["reason"] for r in dead.values()} == {"handler-rejected"}

    out = io.StringIO()
    with redirect_stdout(out):
        code = redrive_main(["--set", f"redis.url={server.url}", "--set", "streams.keys=orders",
                             "--set", "redrive.reasons=handler-rejected"])
    assert code == 0
    assert client.xlen("{orders}:dlq") == 0
    back = [f for _, f in client.xrange("orders")[len(ids):]]  # redriven: new entries
    assert sorted(f[b"n"] for f in back) == sorted(
        str(i).encode() for i, v in enumerate(VERDICTS) if v == "reject")
