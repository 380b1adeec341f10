"""Attacks on the lease kept for a handler call abandoned at ``handler.timeout_s``
(``recovery/executor/handover/abandoned.py``: ``keep_leased``, called from
``recovery/executor/handover/modes/handler.py``: ``HandlerCalls.run``), through the job's
command line (spark-submit, or in-process on the suite's session: ``run_in_process``),
checked in Redis (XPENDING, the handler's own records, the dead-letter stream).

A test whose docstring says FINDING failed on the code it was written against (the commit
that adds this file); one that says HOLDS passed and is kept as a check that its fault landed
and changed nothing it must not.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from recovery.redis_io.dlq_names import dead_letter_key
from tests.support.fault_tools import (
    finished,
    kill_tree,
    spark_submit,
    wait_until,
    write_control,
)
from tests.support.hung_calls import (
    HANGS_ONCE,
    OPTS,
    use_venv_spark_submit,
)
from tests.support.order_edge_handlers import BEAT, HANG, RELEASE
from tests.support.order_handler import DONE, SEEN
from tests.support.order_tools import STREAM, args, recorded, seed

OTHER = "other"
KEEPER_OPTS = (*OPTS, HANGS_ONCE)


@pytest.mark.slow
def test_a_stream_deleted_while_its_call_hangs_fails_the_run_at_the_keepers_first_renewal(
        redis_server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """FINDING. Claim (GUARANTEES "Failure by failure", stream deleted / group destroyed
    mid-run): that unit's remaining rows are reported ``skipped`` (vanished), other units
    go on and what they claimed ends processed, not left on the job's consumer; exit 0;
    "the same ... also inside its scripts (... lease renewal ...)". And (GUARANTEES
    "Delivery", abandoned calls) the keeping of a timed-out call's entries never fails a
    run.

    Through spark-submit (local[2]: a task is not retried). ``orders`` (k0: H, E2) and
    ``other`` (o0, o1: two entries each), one task in per-key order. While the handler call
    on H hangs (its beat counter exists), the stream ``orders`` is deleted (DEL: EXISTS
    answers 0 afterwards). At handler.timeout_s the call is abandoned and ``keep_leased``
    renews H at once on the task's client: lease_owned.lua's XPENDING answers NOGROUP, which
    ``_renew`` does not catch, so it is raised out of ``HandlerCalls.run`` and fails the
    task (stderr: ``NOGROUP No such key 'orders' ... script: ...``). Redis then shows
    ``other``'s entries still pending (XPENDING) although nothing of ``other`` failed, and
    the run exits 1 instead of 0. (On the suite's session, local[2,3], Spark retries the
    task and the retry gets through: the failure is hidden there, not absent.)

    At fault: ``recovery/executor/handover/abandoned.py`` ``keep_leased`` -> ``_renew``:
    the first renewal runs on the task's client and lets a NOGROUP / WRONGTYPE (a unit
    vanished, ``recovery.redis_io.error_codes.unit_vanished``) out into the worker; the
    keeper thread swallows the same error, the first renewal does not.

    Fixed: every renewal runs in the keeper thread, and a unit whose stream or group is
    gone is dropped there (nothing left to keep); nothing of the keeping raises into the
    task."""
    use_venv_spark_submit(monkeypatch)
    client = redis_server.client()
    write_control(redis_server.url)
    head = seed(client, keys=1, per_key=2)["k0"][0]
    others = seed(client, keys=2, per_key=2, stream=OTHER, prefix="o")
    other_ids = sorted(i for ids in others.values() for i in ids)
    client.sadd(HANG, head)
    logs = tmp_path / "logs"
    proc = spark_submit([*args(redis_server.url, tmp_path / "r", *KEEPER_OPTS),
                         "--set", f"streams.keys={STREAM},{OTHER}"], logs)
    try:
        assert wait_until(lambda: bool(client.exists(BEAT + head)), proc, 300,
                          "the call on H to hang"), "the run ended before H's call hung"
        client.delete(STREAM)
        deleted = client.exists(STREAM) == 0
        result = finished(proc, logs, 300)
    finally:
        client.set(RELEASE, 1)
        kill_tree(proc)
    assert deleted, "the stream was not deleted: no fault to test"
    left = [r["message_id"].decode() for r in client.xpending_range(OTHER, "g", "-", "+", 100)]
    nogroup = [line for line in result.stderr.splitlines() if "NOGROUP" in line][:1]
    assert result.code == 0 and left == [], (
        f"the deletion of {STREAM!r} during its hung call cost the other unit: exit "
        f"{result.code}, {OTHER!r} still pending {left} of {other_ids}; handed over: "
        f"{recorded(client, SEEN, list(others))}; first NOGROUP line: {nogroup}")
    assert not client.exists(dead_letter_key(OTHER, ":dlq"))
    done = recorded(client, DONE, list(others))
    assert sorted(i for ids in done.values() for i in ids) == other_ids, done
