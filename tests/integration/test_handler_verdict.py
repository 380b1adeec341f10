"""A handler that can say "never retry this" (recovery.handlers.Result.dead_letter, handled by
recovery.executor.handover.modes.handler): the entry is dead-lettered in this run, on its
first delivery, with ``x-death-reason`` ``handler-rejected`` and the handler's error, through
the same atomic move as the delivery limit's; the report, the summary, the dead-letter job's
reasons and the redrive's reason filter know it. Checked in Redis on every server flavor (the
exception's verdict, the same move, on Redis 7.0).

The same verdict for an exception class named in ``handler.dead_letter_exceptions``
(recovery.handlers.load_exceptions, checked on the driver by
recovery.driver.handler_choice): raised for a batch of one, that message is dead-lettered;
for a larger batch the messages are handed over again one by one, so only those that raise it
are; any other exception still fails the whole batch."""

from __future__ import annotations

import io
from contextlib import redirect_stdout
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from recovery.errors import HandlerError
from recovery.handlers import (
    BatchRejected,
    Message,
    Result,
    load_exceptions,
    normalise_reply,
    run_handler,
)
from recovery.jobs.redrive import RedriveJob
from recovery.report.run_report import read_run
from recovery.testing.backlog import add_entries, create_group, deliver, make_stuck
from recovery.testing.local_redis import LocalServer
from tests.support.fault_tools import GROUP, job_args, run_in_process
from tests.support.handlers import Garbled, Unparseable, raises_per_message
from tests.support.invariants import pel
from tests.support.servers import ON_ONE_SERVER

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
        code = RedriveJob().main(["--set", f"redis.url={server.url}",
                                  "--set", "streams.keys=orders",
                                  "--set", "redrive.reasons=handler-rejected"])
    assert code == 0
    assert client.xlen("{orders}:dlq") == 0
    back = [f for _, f in client.xrange("orders")[len(ids):]]  # redriven: new entries
    assert sorted(f[b"n"] for f in back) == sorted(
        str(i).encode() for i, v in enumerate(VERDICTS) if v == "reject")


UNPARSEABLE = "tests.support.handlers.Unparseable"
PER_MESSAGE = ["ok", "unparseable", "fail", "ok", "garbled", "ok"]


def messages_of(verdicts: list[str]) -> list[Message]:
    return [Message("s", "g", f"{i}-0", [(b"n", str(i).encode()), (b"verdict", v.encode())], 2)
            for i, v in enumerate(verdicts)]


def test_a_named_exception_dead_letters_a_batch_of_one_and_splits_a_larger_one() -> None:
    rejects = load_exceptions([UNPARSEABLE])
    assert rejects == (Unparseable,)
    [one] = run_handler(raises_per_message, messages_of(["garbled"]), rejects=rejects)
    assert one == Result.dead_letter("Garbled: garbled message 0")  # a subclass counts
    assert Garbled.__mro__[1] is Unparseable
    with pytest.raises(BatchRejected, match="cannot parse message 1"):
        run_handler(raises_per_message, messages_of(["ok", "unparseable"]), rejects=rejects)
    # Another exception, or none named: the whole batch fails, as without the setting.
    for verdicts, named in ((["unparseable"], ()), (["ok", "boom"], rejects)):
        results = run_handler(raises_per_message, messages_of(verdicts), rejects=named)
        assert {(r.ok, r.final) for r in results} == {(False, False)}, results


@pytest.mark.parametrize(("path", "message"), [
    ("no_such_module.Unparseable", "module 'no_such_module' does not import"),
    ("tests.support.handlers.NoSuchClass", "'NoSuchClass' in 'tests.support.handlers' is not "
                                           "an exception class"),
    ("tests.support.handlers:raises_per_message", "is not an exception class"),
    ("tests.support.handlers.Message", "is not an exception class"),
])
def test_an_exception_path_that_is_no_exception_class_is_refused(path, message) -> None:
    with pytest.raises(HandlerError, match=message):
        load_exceptions([path])


@pytest.mark.parametrize("path", ["Unparseable", "tests.support.handlers.", "a b.C"])
def test_a_malformed_exception_path_is_refused_by_the_settings(path, redis_server, tmp_path
                                                              ) -> None:
    client = redis_server.client()
    add_entries(client, "orders", 1, lambda i: {"n": str(i)})
    before = client.xrange("orders")
    result = run_in_process(None, job_args(redis_server.url, tmp_path / "r", ["orders"],
                                           f"handler.dead_letter_exceptions={path}"))
    errors = result.stderr.strip().splitlines()
    assert result.code == 2 and len(errors) == 1, result.stderr
    assert "handler.dead_letter_exceptions" in errors[0] and "ClassName" in errors[0]
    assert client.xrange("orders") == before and client.keys("*") == [b"orders"]


def test_an_exception_class_that_does_not_import_stops_the_run_before_redis(
        redis_server, tmp_path) -> None:
    client = redis_server.client()
    ids = stuck_once(client, "orders", ["ok", "ok"])
    before = pel(client, "orders", GROUP)
    result = run_in_process(None, job_args(
        redis_server.url, tmp_path / "r", ["orders"],
        'handler.dead_letter_exceptions=["json.JSONDecodeError", "myapp.errors.Nope"]'))
    errors = result.stderr.strip().splitlines()
    assert result.code == 2 and len(errors) == 1, result.stderr
    assert "'myapp.errors.Nope'" in errors[0] and "does not import" in errors[0]
    assert pel(client, "orders", GROUP) == before and len(before) == len(ids)
    assert client.keys("*") == [b"orders"]


def stuck_once(client, stream: str, verdicts: list[str]) -> list[str]:
    create_group(client, stream, GROUP)
    ids = add_entries(client, stream, len(verdicts),
                      lambda i: {"n": str(i), "verdict": verdicts[i]})
    deliver(client, stream, GROUP, "crashed", len(ids))
    make_stuck(client, stream, GROUP, "crashed", ids, HOUR_MS)  # delivered once
    return ids


@pytest.mark.slow
@ON_ONE_SERVER  # the verdict's move on every server: test_a_rejected_entry_is_dead_lettered_at_once
def test_a_named_exception_dead_letters_only_the_message_that_raised_it(
        spark: SparkSession, server: LocalServer, tmp_path: Path) -> None:
    client = server.client()
    ids = stuck_once(client, "orders", PER_MESSAGE)
    args = job_args(server.url, tmp_path / "reports", ["orders"],
                    "handler.path=tests.support.handlers:raises_per_message",
                    f"handler.dead_letter_exceptions={UNPARSEABLE}")
    result = run_in_process(spark, args)  # one batch of 6: raises, then one by one
    assert result.code == 0, result.stderr
    totals = result.summary["totals"]
    assert (totals["reprocessed"], totals["dead_lettered"], totals["failed"]) == (3, 2, 1)

    letters = {f[b"x-original-id"].decode(): f for _, f in client.xrange("{orders}:dlq")}
    assert sorted(letters) == sorted([ids[1], ids[4]])
    assert letters[ids[1]][b"x-exception-message"] == b"Unparseable: cannot parse message 1"
    assert letters[ids[4]][b"x-exception-message"] == b"Garbled: garbled message 4"
    assert {f[b"x-death-reason"] for f in letters.values()} == {b"handler-rejected"}
    assert {f[b"x-delivery-count"] for f in letters.values()} == {b"2"}  # its first retry
    assert list(pel(client, "orders", GROUP)) == [ids[2]]  # the failure stays pending
    rows = read_run(spark, str(tmp_path / "reports"), result.summary["run_id"]).collect()
    assert sorted((r["id"], r["action"], r["reason"]) for r in rows
                  if r["action"] == "dead_lettered") == sorted(
        (i, "dead_lettered", "handler-rejected") for i in (ids[1], ids[4]))


@pytest.mark.slow
def test_another_exception_still_fails_the_whole_batch(
        spark: SparkSession, redis_server: LocalServer, tmp_path: Path) -> None:
    client = redis_server.client()
    ids = stuck_once(client, "orders", ["ok", "boom", "unparseable"])
    args = job_args(redis_server.url, tmp_path / "reports", ["orders"],
                    "handler.path=tests.support.handlers:raises_per_message",
                    f"handler.dead_letter_exceptions={UNPARSEABLE}")
    result = run_in_process(spark, args)
    assert result.code == 0, result.stderr
    assert result.summary["totals"]["failed"] == 3
    assert sorted(pel(client, "orders", GROUP)) == sorted(ids)
    assert not client.exists("{orders}:dlq")


@pytest.mark.slow
def test_a_timeout_while_retrying_one_by_one_keeps_the_verdicts_so_far(
        spark: SparkSession, redis_server: LocalServer, tmp_path: Path) -> None:
    """The retry one by one keeps ``handler.timeout_s``: the message that hangs fails, the
    later ones of its stream are not handed over (they stay pending); those before keep their
    own verdicts."""
    client = redis_server.client()
    ids = stuck_once(client, "orders", ["ok", "unparseable", "hang", "ok"])
    args = job_args(redis_server.url, tmp_path / "reports", ["orders"],
                    "handler.path=tests.support.handlers:raises_per_message",
                    f"handler.dead_letter_exceptions={UNPARSEABLE}", "handler.timeout_s=1")
    result = run_in_process(spark, args)
    assert result.code == 0, result.stderr
    totals = result.summary["totals"]
    assert (totals["reprocessed"], totals["dead_lettered"], totals["failed"]) == (1, 1, 2)
    assert [f[b"x-original-id"].decode() for _, f in client.xrange("{orders}:dlq")] == [ids[1]]
    assert sorted(pel(client, "orders", GROUP)) == sorted(ids[2:])
