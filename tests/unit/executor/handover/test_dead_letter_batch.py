"""Dead-letter moves of several units in one script call (standalone servers), through the
hand-over (``recovery.executor.handover.apply.apply_batch``; the moves:
``recovery.executor.handover.dead_letter``), against real servers, no Spark.

What Redis holds afterwards is read back (XRANGE of the dead-letter streams, the source
PELs) and the script calls are counted in INFO commandstats.
"""

from __future__ import annotations

import pyarrow as pa
import pytest
from redis import Redis

from recovery.executor.claimed import Claimed
from recovery.executor.handover.apply import apply_batch
from recovery.executor.handover.lease import REASON_DELETED, REASON_GONE, REASON_VANISHED
from recovery.redis_io.dlq_names import dead_letter_key, refused_reason
from recovery.redis_io.error_codes import TargetRefused
from recovery.redis_io.redis_conn import connect
from recovery.redis_io.scripts import load_scripts
from recovery.schemas import CLAIMED, Action, DeathReason, arrow
from recovery.settings.model import executor_params

GROUP, DEAD, JOB, RUN = "workers", "crashed", "recovery-r1-0", "r1"
STREAMS = ("a", "b", "gone", "d")  # the batch's units, in order; "gone" vanishes
PER_STREAM = 3
DELIVERIES = 9  # over the default limit (5)
META = [b"x-original-stream", b"x-original-group", b"x-original-id", b"x-delivery-count",
        b"x-delivery-limit", b"x-idle-ms", b"x-death-reason", b"x-death-time", b"x-run-id",
        b"x-original-consumer"]


def over_limit_rows(client: Redis, stream: str) -> list[dict]:
    """CLAIMED rows of `PER_STREAM` entries of `stream`, delivered to a dead consumer, then
    claimed by the job's consumer, with a delivery count over the limit."""
    ids = [client.xadd(stream, {"n": f"{stream}{k}"}).decode() for k in range(PER_STREAM)]
    client.xgroup_create(stream, GROUP, id="0")
    client.xreadgroup(GROUP, DEAD, {stream: ">"})
    client.xclaim(stream, GROUP, JOB, 0, ids)
    return [{"stream": stream, "group": GROUP, "consumer": JOB, "id": i, "deleted": False,
             "previous_consumer": DEAD, "idle_ms": 3_600_000 + k,
             "fields": [{"name": b"n", "value": f"{stream}{k}".encode()}],
             "delivery_count": DELIVERIES} for k, i in enumerate(ids)]


def vanish(client: Redis, how: str) -> None:
    """Make the unit of stream "gone" vanish: its group destroyed, its key replaced, or its
    dead-letter key taken by another type (the move script refuses that target: its entries
    are skipped as refused, and stay pending)."""
    if how == "destroy":
        client.xgroup_destroy("gone", GROUP)
    elif how == "retype":
        client.delete("gone")
        client.set("gone", "not a stream any more")
    else:
        client.set(dead_letter_key("gone", ":dlq"), "not a stream")


def evalsha_calls(client: Redis) -> int:
    return int(client.info("commandstats").get("cmdstat_evalsha", {}).get("calls", 0))


def letters(client: Redis, stream: str) -> list[tuple[str, list[bytes], dict[bytes, bytes]]]:
    """The dead letters of `stream`: (ID, field names in order, fields)."""
    rows = client.xrange(dead_letter_key(stream, ":dlq"))
    return [(i.decode(), list(f), f) for i, f in rows]


@pytest.mark.parametrize("how", ["destroy", "retype", "dlq-retype"])
@pytest.mark.parametrize(("batch_size", "calls"), [(200, 1), (6, 2)])
def test_units_share_script_calls_and_a_vanished_one_costs_only_its_own_entries(
        server, client, make_settings, how, batch_size, calls):
    rows = [r for s in STREAMS for r in over_limit_rows(client, s)]
    ids = {s: [r["id"] for r in rows if r["stream"] == s] for s in STREAMS}
    client.xclaim("a", GROUP, "other-run", 0, [ids["a"][1]])  # another run took it since
    client.xdel("b", ids["b"][2])  # deleted upstream since the claim
    vanish(client, how)
    load_scripts(client)
    client.config_resetstat()

    settings = make_settings('streams.keys=["a"]', f"dead_letter.batch_size={batch_size}")
    job = connect(executor_params(settings, RUN).redis)
    try:
        batch = pa.RecordBatch.from_pylist(rows, schema=arrow(CLAIMED))
        report = apply_batch(job, executor_params(settings, RUN), Claimed.from_arrow(batch))
    finally:
        job.close()

    # 12 entries of 4 units: one call of all; in calls of at most 6 entries, two units each.
    assert evalsha_calls(client) == calls
    rows_out = report.to_pylist()
    assert [(r["stream"], r["id"]) for r in rows_out] == [(r["stream"], r["id"]) for r in rows]
    by_key = {(r["stream"], r["id"]): r for r in rows_out}
    # A dead-letter key of another type is no vanished unit but a refused target (issue 60).
    gone_reason = REASON_VANISHED if how != "dlq-retype" else refused_reason(
        dead_letter_key("gone", ":dlq"), TargetRefused("string", "it is no stream"))
    left = {("a", ids["a"][1]): (Action.SKIPPED, REASON_GONE),
            ("b", ids["b"][2]): (Action.DELETED, REASON_DELETED),
            **{("gone", i): (Action.SKIPPED, gone_reason) for i in ids["gone"]}}
    assert {k: (r["action"], r["reason"]) for k, r in by_key.items() if k in left} == left
    moved = {k: r["dead_letter_id"] for k, r in by_key.items() if k not in left}
    assert {by_key[k]["action"] for k in moved} == {Action.DEAD_LETTERED}

    for stream in ("a", "b", "d"):
        dlq = letters(client, stream)
        expected = [(i, f"{stream}{k}".encode()) for k, i in enumerate(ids[stream])
                    if (stream, i) in moved]
        assert [(f[b"x-original-id"].decode(), f[b"n"]) for _, _, f in dlq] == expected
        assert [i for i, _, _ in dlq] == [moved[stream, i] for i, _ in expected]
        for _, names, f in dlq:
            assert names == [b"n", *META]
            k = ids[stream].index(f[b"x-original-id"].decode())
            assert (f[b"x-original-stream"], f[b"x-original-group"], f[b"x-delivery-count"],
                    f[b"x-delivery-limit"], f[b"x-idle-ms"], f[b"x-death-reason"],
                    f[b"x-run-id"], f[b"x-original-consumer"]) == (
                stream.encode(), GROUP.encode(), str(DELIVERIES).encode(), b"5",
                str(3_600_000 + k).encode(), DeathReason.OVER_LIMIT.encode(), RUN.encode(),
                DEAD.encode())
        # Nothing of the job's is left pending; the other run's entry is still its own.
        pending = client.xpending_range(stream, GROUP, "-", "+", 100)
        assert [(p["message_id"].decode(), p["consumer"].decode()) for p in pending] == (
            [(ids["a"][1], "other-run")] if stream == "a" else [])
    if how == "dlq-retype":  # nothing moved, nothing acked
        assert client.type(dead_letter_key("gone", ":dlq")) == b"string"
        assert [p["consumer"] for p in client.xpending_range("gone", GROUP, "-", "+", 9)] == [
            JOB.encode()] * PER_STREAM
    else:
        assert client.exists(dead_letter_key("gone", ":dlq")) == 0
