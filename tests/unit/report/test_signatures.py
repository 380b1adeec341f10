"""Failed entries made visible (recovery.report.signatures): a run whose handler fails says
so in a WARNING line and in its summary's ``failed_errors`` (by reason and error signature),
keeps its exit code 0 unless ``handler.max_failed_ratio`` says otherwise, and leaves the
failed entries pending for the next run (checked in Redis). The plain-Python signature the
dead-letter console uses (recovery.report.signature_rules) gives Spark's, message for message."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from recovery.report.signature_rules import signature_text
from recovery.report.signatures import failed_errors, signature, uncertain_warning
from recovery.rows import FailedErrors
from recovery.schemas import REPORT
from recovery.testing.backlog import add_entries, create_group, deliver, make_stuck
from recovery.testing.local_redis import LocalServer
from tests.support.fault_tools import GROUP, job_args, run_in_process
from tests.support.invariants import pel

pytestmark = pytest.mark.slow  # Spark jobs
HANDLER_FAILED = "handler failed; stays pending for the next run"  # the report's reason


def report_row(action: str, reason: str | None, error: str | None) -> dict[str, object]:
    return {"stream": "s", "group": "g", "id": "1-0", "previous_consumer": "c",
            "delivery_count": 1, "idle_ms": 1, "action": action, "reason": reason,
            "error": error, "dead_letter_id": None, "requeued_id": None, "reassigned_to": None}


def test_failed_entries_count_by_reason_and_signature(spark: SparkSession) -> None:
    rows = [report_row("failed", HANDLER_FAILED, f"timeout after {ms} ms on order {n}")
            for ms, n in ((3012, 88), (17, 5), (40, 1))]
    rows += [report_row("failed", HANDLER_FAILED, "HTTPError: 400 bad payload '7-1'")]
    rows += [report_row("failed", "too big", None)]
    rows += [report_row("reprocessed", None, "timeout after 1 ms on order 1")]  # not failed
    errors = failed_errors(spark.createDataFrame(rows, REPORT))
    assert errors == [
        FailedErrors(HANDLER_FAILED, "timeout after <n> ms on order <n>", 3,
                     "timeout after 17 ms on order 5"),
        FailedErrors(HANDLER_FAILED, "HTTPError: <n> bad payload <str>", 1,
                     "HTTPError: 400 bad payload '7-1'"),
        FailedErrors("too big", None, 1, None),
    ]
    assert failed_errors(spark.createDataFrame(rows, REPORT), top=1) == errors[:1]


def test_the_uncertain_warning_names_the_count_and_where_to_look() -> None:
    text = uncertain_warning("r1", 2)
    assert "2 entries reported skipped as uncertain" in text and "reason says where" in text


def test_a_failing_handler_is_a_warning_and_a_summary_key(
        spark: SparkSession, redis_server: LocalServer, tmp_path: Path,
        caplog: pytest.LogCaptureFixture) -> None:
    client = redis_server.client()
    create_group(client, "orders", GROUP)
    ids = add_entries(client, "orders", 12,
                      lambda i: {"n": str(1000 + i), **({"kind": "bad"} if i < 2 else {})})
    deliver(client, "orders", GROUP, "dead", len(ids))
    make_stuck(client, "orders", GROUP, "dead", ids, idle_ms=3_600_000)
    caplog.set_level(logging.WARNING, logger="recovery")
    result = run_in_process(spark, job_args(redis_server.url, tmp_path, ["orders"],
                                            "handler.path=tests.support.handlers:downstream_down"))
    assert result.code == 0, result.stderr
    assert result.summary["totals"]["failed"] == 12
    assert result.summary["failed_errors"] == [
        {"reason": HANDLER_FAILED, "entries": 10,
         "signature": "RuntimeError: downstream API returned <n> for order <n>",
         "example": "RuntimeError: downstream API returned 503 for order 1002"},
        {"reason": HANDLER_FAILED, "entries": 2,
         "signature": "HTTPError: <n> bad payload <str>",
         "example": f"HTTPError: 400 bad payload '{ids[0]}'"},
    ]
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("12 entries failed" in w and
               "10 x RuntimeError: downstream API returned <n> for order <n>" in w
               for w in warnings), warnings
    left = pel(client, "orders", GROUP)
    assert sorted(left) == sorted(ids)  # all still pending, for the next run
    assert {p.delivery_count for p in left.values()} == {2}  # delivered once more, by the run


def test_python_signature_is_sparks(spark: SparkSession) -> None:
    messages = ["timeout after 3012 ms on order 88", "HTTPError: 400 bad payload '7-1'",
                'bad "quoted 12" at 0xFF and deadbeef12 in 1700000000000-3',
                "uuid 123e4567-e89b-12d3-a456-426614174000 \t twice  spaced\n",
                "ünïcode \u0663 digits \uff13 and 1.5 kB", "", "  "]
    frame = spark.createDataFrame([(m,) for m in messages], "message string")
    sparks = [r[0] for r in frame.select(signature(frame["message"])).collect()]
    assert [signature_text(m) for m in messages] == sparks
