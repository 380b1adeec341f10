"""recovery.executor.handover.abandoned against a real server: the entries of a handler call
abandoned at its timeout stay leased to the job's consumer while the call runs, and only
theirs."""

from __future__ import annotations

import threading

from recovery.executor.handover.abandoned import keep_leased
from recovery.params import RedisParams, Unit
from tests.support.fault_tools import wait_until

STREAM, GROUP, JOB, OTHER = "s", "g", "recovery-r-0", "live"
AGED_MS = 100_000


def _idle(client, entry_id: str) -> int:
    (row,) = client.xpending_range(STREAM, GROUP, entry_id, entry_id, 1)
    return int(row["time_since_delivered"])


def _age(client, owner: str, entry_id: str) -> None:
    """Make `entry_id` look idle AGED_MS on `owner` (XCLAIM IDLE, delivery count kept)."""
    client.xclaim(STREAM, GROUP, owner, 0, [entry_id], idle=AGED_MS, justid=True)


def test_a_running_calls_entries_stay_leased_until_it_ends_and_no_one_elses(redis_server):
    client = redis_server.client()
    ids = [client.xadd(STREAM, {"n": str(i)}).decode() for i in range(3)]
    client.xgroup_create(STREAM, GROUP, id="0")
    client.xreadgroup(GROUP, JOB, {STREAM: ">"}, count=2)
    client.xreadgroup(GROUP, OTHER, {STREAM: ">"})
    mine, theirs = ids[:2], ids[2]
    for entry_id in mine:
        _age(client, JOB, entry_id)
    _age(client, OTHER, theirs)
    release = threading.Event()
    call = threading.Thread(target=release.wait, daemon=True)
    call.start()
    params = RedisParams(url=redis_server.url)
    keep_leased(params, {Unit(STREAM, GROUP, JOB): [*mine, theirs]}, call, 300)

    wait_until(lambda: all(_idle(client, i) < AGED_MS for i in mine), None, 30, "a renewal")
    assert _idle(client, theirs) >= AGED_MS, "another consumer's entry was touched"
    _age(client, JOB, mine[0])  # aged again while the call runs: the keeper renews it
    wait_until(lambda: _idle(client, mine[0]) < AGED_MS, None, 30, "a renewal while it runs")
    owners = {c["name"]: c["pending"] for c in client.xpending(STREAM, GROUP)["consumers"]}
    assert owners == {JOB.encode(): 2, OTHER.encode(): 1}

    release.set()
    call.join()
    keepers = [t for t in threading.enumerate() if t.name == "recovery-lease-keeper"]
    for keeper in keepers:
        keeper.join(30)
        assert not keeper.is_alive(), "the keeper outlived the call"
    _age(client, JOB, mine[0])
    assert _idle(client, mine[0]) >= AGED_MS  # no keeper renews it after the call


def test_a_unit_whose_stream_is_gone_keeps_nothing_and_raises_nothing(redis_server):
    """The stream deleted while its call runs: the keeper drops it (NOGROUP inside the
    renewal script) and ends; the other unit's entry is still kept."""
    client = redis_server.client()
    for stream in ("gone", STREAM):
        client.xadd(stream, {"n": "0"})
        client.xgroup_create(stream, GROUP, id="0")
        client.xreadgroup(GROUP, JOB, {stream: ">"})
    (row,) = client.xpending_range(STREAM, GROUP, "-", "+", 1)
    entry_id = row["message_id"].decode()
    client.delete("gone")
    _age(client, JOB, entry_id)
    release = threading.Event()
    call = threading.Thread(target=release.wait, daemon=True)
    call.start()
    keep_leased(RedisParams(url=redis_server.url), {
        Unit("gone", GROUP, JOB): [entry_id], Unit(STREAM, GROUP, JOB): [entry_id]}, call, 300)
    wait_until(lambda: _idle(client, entry_id) < AGED_MS, None, 30, "the other unit renewed")
    release.set()
    assert not client.exists("gone")


def test_nothing_is_kept_for_a_call_that_already_ended(redis_server):
    client = redis_server.client()
    entry_id = client.xadd(STREAM, {"n": "0"}).decode()
    client.xgroup_create(STREAM, GROUP, id="0")
    client.xreadgroup(GROUP, JOB, {STREAM: ">"})
    _age(client, JOB, entry_id)
    call = threading.Thread(target=lambda: None)
    call.start()
    call.join()
    before = {t.ident for t in threading.enumerate()}
    keep_leased(RedisParams(url=redis_server.url), {Unit(STREAM, GROUP, JOB): [entry_id]},
                call, 300)
    assert [t.name for t in threading.enumerate() if t.ident not in before] == []
