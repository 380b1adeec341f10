"""Keys held across runs behind a dead-lettered head (issue 63, ``order.dead_letter_releases
= false``): ``recovery.redis_io.key_holds``, the hold written by ``dead_letter.lua`` in the
move's own call, read by every later hand-over (``recovery.executor.ordered``), shown by the
group health (``recovery.driver.health``) and predicted by a dry run
(``recovery.executor.survey``).

Against real servers (Redis 7.0, Redis 6.2, Valkey 8.1); each test reads Redis itself: the
hash of held keys, the dead-letter stream, the PEL.
"""

from __future__ import annotations

import re
import shlex
import time
from pathlib import Path

import pytest
import redis
from redis import Redis, ResponseError
from redis.crc import key_slot

from recovery.driver.discovery import WorkUnit
from recovery.driver.ordered import move_holds_command, refuse_holds_elsewhere
from recovery.errors import ConfigError, DeadLetterNameError, HeldElsewhereError
from recovery.params import JobParams, RedisParams
from recovery.redis_io.dlq_names import dead_letter_key
from recovery.redis_io.held_keys import pending_elsewhere
from recovery.redis_io.key_holds import (
    HOLD_PREFIXES,
    earlier_hold_key,
    hold_key,
    parse_hold,
    read_heads,
)
from recovery.redis_io.redis_conn import RedisConn, connect
from recovery.redis_io.round_trips import each
from recovery.redis_io.scripts import DeadLetter, DeadLetterContext, dead_letter_units
from recovery.settings.model import executor_params, load_settings
from recovery.testing.backlog import add_entries, create_group, deliver
from tests.support.acl_rules import PASSWORD, create_users, refusals, setinfo_refusal
from tests.support.backlogs import DEAD, HOUR_MS
from tests.support.cluster_fixtures import keys_on_every_primary
from tests.support.fault_tools import GROUP, ROOT, run_in_process, write_control
from tests.support.order_handler import DONE, SEEN
from tests.support.order_tools import STREAM, age, args, pending_owners, recorded, rows_of, seed

HOLD = "order.dead_letter_releases=false"
HELD = hold_key("recovery:held:", STREAM, GROUP)



def refuse(client: redis.Redis, params: JobParams, units: list[WorkUnit], dry_run: bool) -> None:
    """``refuse_holds_elsewhere`` on `client`, opened from ``params.redis``."""
    refuse_holds_elsewhere(RedisConn(client, params.redis), params, units, dry_run)

def test_the_hash_of_held_keys_shares_its_streams_slot() -> None:
    assert hold_key("recovery:held:", "orders", "g") == "recovery:held:{orders}/g"
    assert hold_key("recovery:held:", "orders{eu}", "g") == "recovery:held:{eu}/orders{eu}/g"
    assert hold_key("p:", "events:{eu}:pay", "svc:b/%") == \
        "p:{eu}/events%3A{eu}%3Apay/svc%3Ab%2F%25"
    assert earlier_hold_key("p:", "orders", "g") == "p:{orders}:g"
    assert earlier_hold_key("p:", "orders{eu}", "g") == "p:orders{eu}:g"
    for stream in ("orders", "orders{eu}", "a{b}c"):
        assert key_slot(hold_key("p:", stream, "any{x}").encode()) == key_slot(stream.encode())
    with pytest.raises(DeadLetterNameError, match="no hash tag"):
        hold_key("recovery:held:", "a}b", "g")
    assert parse_hold(b"5-1 7-0") == ("5-1", "7-0")
    assert parse_hold(b"someone else's") is None and parse_hold(None) is None


def test_a_hold_prefix_with_a_brace_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"order\.hold_prefix: .* has a brace"):
        load_settings(None, ["streams.keys=o", "order.key_field=k",
                             "order.hold_prefix=x{y}:"])


def _pending_three(client: Redis) -> list[str]:
    create_group(client, STREAM, GROUP)
    ids = add_entries(client, STREAM, 3, lambda i: {"k": "k0", "n": str(i)})
    assert deliver(client, STREAM, GROUP, "c", 3) == ids
    return ids


def _move(client: Redis, ids: list[str], key: bytes | None, held: str = HELD) -> object:
    ctx = DeadLetterContext(STREAM, GROUP, "c", dead_letter_key(STREAM, ":dlq"), "run-t", 5,
                            int(time.time() * 1000), hold_key=held)
    [replies] = dead_letter_units(client, [(ctx, [DeadLetter(i, 6, 1000, "old", "r", None, key)
                                                  for i in ids])])
    return replies


def test_the_move_records_the_hold_in_the_same_call_and_keeps_the_first_head(
        client: Redis) -> None:
    """dead_letter.lua with a hash of held keys: the head moves and its key is recorded as
    held behind it (``<head> <dead-letter ID>``); a second head of the same key moved
    later keeps the first record; an entry without a key records nothing."""
    ids = _pending_three(client)
    [first] = _move(client, ids[:1], b"k0")
    assert isinstance(first, bytes)
    assert client.hget(HELD, "k0") == f"{ids[0]} {first.decode()}".encode()
    _move(client, ids[1:2], b"k0")
    _move(client, ids[2:], None)
    assert client.hgetall(HELD) == {b"k0": f"{ids[0]} {first.decode()}".encode()}
    assert client.xlen(dead_letter_key(STREAM, ":dlq")) == 3
    assert client.xpending(STREAM, GROUP)["pending"] == 0
    assert read_heads(client, [(HELD, [b"k0", b"k9"])]) == [[(ids[0], first.decode()), None]]


def test_a_hash_of_held_keys_of_another_type_refuses_the_move_untouched(
        client: Redis) -> None:
    """A key of another type where the hash of held keys belongs: nothing of the unit is
    written or acked (the head stays pending, so it still holds its key)."""
    ids = _pending_three(client)
    client.set(HELD, "not a hash")
    refused = _move(client, ids[:1], b"k0")
    assert isinstance(refused, ResponseError) and "NOTLETTERS hold:string" in str(refused)
    assert client.get(HELD) == b"not a hash"
    assert not client.exists(dead_letter_key(STREAM, ":dlq"))
    assert client.xpending(STREAM, GROUP)["pending"] == 3


def _over_limit(client: Redis, entry_id: str) -> None:
    """Deliveries 9 (over the limit of 5 after the run's claim), idle an hour."""
    client.xclaim(STREAM, GROUP, DEAD, 0, [entry_id], idle=HOUR_MS, retrycount=9, justid=True)


def _health_held(spark, summary: dict) -> list[int | None]:  # type: ignore[no-untyped-def]
    return [r["held_keys"] for r in spark.read.parquet(summary["health_path"]).collect()]


@pytest.mark.slow
def test_a_head_dead_lettered_at_the_limit_holds_its_key_across_runs_until_released(
        spark, server, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """k0's head is over the delivery limit. A dry run predicts: the head would be
    dead-lettered and would hold k0's two later entries; nothing is touched. The run does
    it: head in the dead-letter stream, k0 recorded in the hash of held keys, its later
    entries pending and held, k1 handled; the health shows one held key. The next run (the
    entries idle again) hands none of k0 over. Once the operator deletes the field, the
    following run hands k0's entries over in ID order."""
    client = server.client()
    write_control(server.url)
    ids = seed(client, keys=2, per_key=3)
    head = ids["k0"][0]
    _over_limit(client, head)
    sets = args(server.url, tmp_path / "r", "spark.partitions=2", HOLD)
    dry = run_in_process(spark, [*sets, "--dry-run"])
    assert dry.code == 0, dry.stderr[-3000:]
    assert (dry.summary["totals"]["would_dead_letter"], dry.summary["totals"]["would_hold"],
            dry.summary["totals"]["would_reprocess"]) == (1, 2, 3), dry.summary["totals"]
    dry_rows = rows_of(spark, tmp_path / "r", dry.summary)
    assert "would hold its key's later entries" in dry_rows[head]["reason"]
    assert not client.exists(HELD) and client.xpending(STREAM, GROUP)["pending"] == 6

    first = run_in_process(spark, sets)
    assert first.code == 0, first.stderr[-3000:]
    dead = client.xrange(dead_letter_key(STREAM, ":dlq"))
    assert [f[b"x-original-id"].decode() for _, f in dead] == [head]
    assert client.hgetall(HELD) == {b"k0": f"{head} {dead[0][0].decode()}".encode()}
    assert recorded(client, DONE, ["k0", "k1"]) == {"k0": [], "k1": ids["k1"]}
    assert set(pending_owners(client)) == set(ids["k0"][1:])
    rows = rows_of(spark, tmp_path / "r", first.summary)
    assert [rows[i]["action"] for i in ids["k0"]] == ["dead_lettered", "held", "held"]
    assert first.summary["held_keys"] == 1
    assert _health_held(spark, first.summary) == [0]  # as found before the run

    age(client, ids["k0"][1:])
    again = run_in_process(spark, [*sets, "--dry-run"])
    assert again.code == 0 and again.summary["totals"]["would_hold"] == 2, again.summary
    second = run_in_process(spark, sets)
    assert second.code == 0, second.stderr[-3000:]
    assert recorded(client, SEEN, ["k0"])["k0"] == []
    rows = rows_of(spark, tmp_path / "r", second.summary)
    for entry_id in ids["k0"][1:]:
        assert rows[entry_id]["action"] == "held"
        assert f"held behind {head} of its key, dead-lettered as" in rows[entry_id]["reason"]
    assert set(pending_owners(client)) == set(ids["k0"][1:])
    assert _health_held(spark, second.summary) == [1]

    client.hdel(HELD, "k0")  # the operator releases k0
    age(client, ids["k0"][1:])
    third = run_in_process(spark, sets)
    assert third.code == 0, third.stderr[-3000:]
    assert recorded(client, DONE, ["k0"])["k0"] == ids["k0"][1:]
    assert client.xpending(STREAM, GROUP)["pending"] == 0


def test_the_read_of_what_others_hold_takes_in_a_consumer_that_appeared_since(
        server) -> None:  # type: ignore[no-untyped-def]
    """``pending_elsewhere`` is given the consumers found with pending entries a moment
    before; one that took entries since (``late``, not in that list) must be read in the
    same snapshot, not missed; this run's own consumer is never read."""
    client = connect(RedisParams(server.url))  # the job's client: raw stream replies
    ids = _pending_three(client)
    client.xclaim(STREAM, GROUP, "late", 0, ids[1:2], justid=True)
    client.xclaim(STREAM, GROUP, "recovery-r1-0", 0, ids[2:], justid=True)
    entries, bound = pending_elsewhere(client, STREAM, GROUP, ["c"], 10, "recovery-r1-")
    assert bound is None
    assert sorted((i, owner) for i, owner, _ in entries) == [(ids[0], "c"), (ids[1], "late")]
    assert all(fields is not None and (b"k", b"k0") in fields for _, _, fields in entries)
    client.xclaim(STREAM, GROUP, "late", 0, ids[2:], justid=True)  # late owns two now
    entries, bound = pending_elsewhere(client, STREAM, GROUP, ["c"], 1, "recovery-r1-")
    assert sorted(i for i, _, _ in entries) == ids[:2] and bound == ids[1]


@pytest.mark.slow
def test_the_hold_is_written_on_each_streams_primary_of_a_cluster(redis_cluster) -> None:  # type: ignore[no-untyped-def]
    """On a Redis Cluster the move script's keys (stream, dead-letter stream, hash of held
    keys) share one slot, whatever primary the stream lives on, a stream with a hash tag
    too: the call is accepted and the hold is on that stream's primary."""
    redis_cluster.wait_healthy()
    redis_cluster.flush()
    rc = connect(RedisParams(redis_cluster.url))  # the job's client
    plain = redis_cluster.client()
    streams = [*keys_on_every_primary(plain, 1, prefix="held"), "tagged{eu}:orders"]
    for stream in streams:
        create_group(plain, stream, GROUP)
        [entry] = add_entries(plain, stream, 1, lambda i: {"k": "k0"})
        assert deliver(plain, stream, GROUP, "c", 1) == [entry]
        held = hold_key("recovery:held:", stream, GROUP)
        ctx = DeadLetterContext(stream, GROUP, "c", dead_letter_key(stream, ":dlq"), "run-t",
                                5, int(time.time() * 1000), hold_key=held)
        [[letter]] = dead_letter_units(rc, [(ctx, [DeadLetter(entry, 6, 1, "", "r", None,
                                                              b"k0")])])
        assert plain.hget(held, "k0") == f"{entry} {letter.decode()}".encode()
        assert plain.xpending(stream, GROUP)["pending"] == 0
    rc.close()
    plain.close()


def test_the_documented_recovery_user_may_write_and_read_the_holds(server) -> None:  # type: ignore[no-untyped-def]
    """docs/ACL.md's recovery user (line 12): the move script's TYPE and HSETNX on the hash
    of held keys, the hand-over's and the dry run's HMGET, the health's HLEN, and the
    driver's look for holds elsewhere (SMEMBERS and SADD of the set of prefixes, HLEN of
    other prefixes' and earlier names), with nothing refused in the ACL LOG but redis-py's
    CLIENT SETINFO."""
    admin = server.client()
    create_users(admin)
    stream = "events:orders"
    create_group(admin, stream, GROUP)
    [entry] = add_entries(admin, stream, 1, lambda i: {"k": "k0"})
    assert deliver(admin, stream, GROUP, "c", 1) == [entry]
    job = connect(RedisParams(server.url, username="recovery", password=PASSWORD))
    held = hold_key("recovery:held:", stream, GROUP)
    ctx = DeadLetterContext(stream, GROUP, "c", dead_letter_key(stream, ":dlq"), "run-t", 5,
                            int(time.time() * 1000), hold_key=held)
    [[letter]] = dead_letter_units(job, [(ctx, [DeadLetter(entry, 6, 1, "", "r", None, b"k0")])])
    assert read_heads(job, [(held, [b"k0"])]) == [[(entry, letter.decode())]]
    assert each(job, [("HLEN", held)]) == [1]
    units = [WorkUnit(stream, GROUP, 1)]
    refuse(job, _params("recovery:held:", stream), units, dry_run=False)
    assert admin.smembers(HOLD_PREFIXES) == {b"recovery:held:"}
    with pytest.raises(HeldElsewhereError, match=re.escape(repr(held))):
        refuse(job, _params("recovery:held:a:", stream), units, dry_run=False)
    assert refusals(admin) <= {setinfo_refusal(admin)}


def _params(prefix: str, *streams: str) -> JobParams:
    """A run's executor parameters: `streams` in per-key order, heads holding their keys
    under `prefix`."""
    return executor_params(load_settings(None, [
        f"streams.keys={','.join(streams)}", "order.key_field=k",
        "order.dead_letter_releases=false", f"order.hold_prefix={prefix}"]), "run-t")


def _move_command(refusal: str) -> list[str]:
    """The command a refusal names, as arguments for ``execute_command`` (no redis-cli)."""
    found = re.search(r"reads: (redis-cli EVAL .*?)(?: \(\d+ more hashes alike\))?; docs/",
                      refusal)
    assert found, refusal
    return shlex.split(found.group(1))[1:]


def test_holds_a_run_would_not_read_refuse_it_until_moved(client: Redis) -> None:
    """Holds under the name an earlier version gave the hash, shared by streams ``a`` and
    ``{a}``, then under a prefix no longer configured: each refuses the run (nothing
    written: no prefix recorded) with the command that moves them; that command moves them
    into each stream's own hash and deletes the old one, and the run may go on."""
    units = [WorkUnit("a", GROUP, 1), WorkUnit("{a}", GROUP, 1)]
    earlier = earlier_hold_key("recovery:held:", "a", GROUP)
    assert earlier == earlier_hold_key("recovery:held:", "{a}", GROUP)
    client.hset(earlier, mapping={"k0": "1-0 9-0", "k1": "2-0 9-1"})
    with pytest.raises(HeldElsewhereError) as refused:
        refuse(client, _params("recovery:held:", "a", "{a}"), units, False)
    assert repr(earlier) in str(refused.value) and "stream '{a}'" in str(refused.value)
    assert not client.exists(HOLD_PREFIXES)
    client.hset(hold_key("recovery:held:", "a", GROUP), "k0", "0-1 9-9")  # held here already
    client.execute_command(*_move_command(str(refused.value)))
    assert not client.exists(earlier)
    assert client.hgetall(hold_key("recovery:held:", "a", GROUP)) == {
        b"k0": b"0-1 9-9", b"k1": b"2-0 9-1"}
    assert client.hgetall(hold_key("recovery:held:", "{a}", GROUP)) == {
        b"k0": b"1-0 9-0", b"k1": b"2-0 9-1"}
    refuse(client, _params("recovery:held:", "a", "{a}"), units, True)
    assert not client.exists(HOLD_PREFIXES)  # a dry run records nothing
    refuse(client, _params("recovery:held:", "a", "{a}"), units, False)
    assert client.smembers(HOLD_PREFIXES) == {b"recovery:held:"}

    with pytest.raises(HeldElsewhereError, match=re.escape(
            "set order.hold_prefix back to 'recovery:held:'")) as refused:
        refuse(client, _params("team:held:", "a", "{a}"), units, False)
    assert client.smembers(HOLD_PREFIXES) == {b"recovery:held:"}
    assert "(1 more hashes alike)" in str(refused.value)
    for _ in units:
        with pytest.raises(HeldElsewhereError) as refused:
            refuse(client, _params("team:held:", "a", "{a}"), units, False)
        client.execute_command(*_move_command(str(refused.value)))
    refuse(client, _params("team:held:", "a", "{a}"), units, False)
    assert client.hgetall(hold_key("team:held:", "a", GROUP))[b"k0"] == b"0-1 9-9"
    assert client.smembers(HOLD_PREFIXES) == {b"recovery:held:", b"team:held:"}
    with pytest.raises(HeldElsewhereError, match=re.escape("back to 'team:held:'")):  # again
        refuse(client, _params("recovery:held:", "a", "{a}"), units, False)
    refuse(client, _params("recovery:held:", "b"), [WorkUnit("b", GROUP, 1)],
                           False)  # another stream's run: nothing of its own elsewhere


def test_the_documented_release_names_the_jobs_hash(client: Redis) -> None:
    """docs/OPERATIONS.md's names of the hashes are the job's, and its HDEL, run as
    written, releases the key the move recorded there (the other key stays held)."""
    text = (ROOT / "docs" / "OPERATIONS.md").read_text()
    section = text[text.index("## Keys held behind a dead letter"):]
    section = section[:section.index("\n## ")]
    assert "`recovery:held:{orders}/billing`" in section
    assert f"`{hold_key('recovery:held:', 'orders{eu}', 'billing')}`" in section
    assert f"`{hold_key('recovery:held:', 'events:{eu}:pay', 'svc:billing')}`" in section
    assert move_holds_command(earlier_hold_key("recovery:held:", "orders", "billing"),
                              [hold_key("recovery:held:", "orders", "billing")]) in section
    [release] = re.findall(r"^redis-cli HDEL .*$", section, re.MULTILINE)
    command = shlex.split(release)[1:]
    assert command[1] == hold_key("recovery:held:", "orders", "billing")
    create_group(client, "orders", "billing")
    ids = add_entries(client, "orders", 2, lambda i: {"k": f"order-{4711 + i}"})
    assert deliver(client, "orders", "billing", "c", 2) == ids
    ctx = DeadLetterContext("orders", "billing", "c", dead_letter_key("orders", ":dlq"),
                            "run-t", 5, int(time.time() * 1000), hold_key=command[1])
    dead_letter_units(client, [(ctx, [DeadLetter(i, 6, 1, "", "r", None, f"order-{4711 + n}"
                                                 .encode()) for n, i in enumerate(ids)])])
    assert client.execute_command(*command) == 1
    assert [h is None for h in read_heads(client, [(command[1], [b"order-4711",
                                                                 b"order-4712"])])[0]] == [
        True, False]


def test_a_dry_runs_read_of_many_keys_is_chunked_and_exact(client: Redis) -> None:
    """``read_heads`` reads a hash in HMGETs of HMGET_CHUNK fields: 2500 keys, every
    other one held, each found with its own head, in order."""
    keys = [f"k{i}".encode() for i in range(2500)]
    client.hset(HELD, mapping={k: f"{i}-0 {i}-1" for i, k in enumerate(keys) if i % 2 == 0})
    [found] = read_heads(client, [(HELD, keys)])
    assert found == [(f"{i}-0", f"{i}-1") if i % 2 == 0 else None for i in range(2500)]
    assert read_heads(client, [(HELD, []), ("recovery:held:{none}/g", keys[:3])]) == [
        [], [None] * 3]


@pytest.mark.slow
def test_the_move_command_runs_in_each_streams_slot_of_a_cluster(redis_cluster) -> None:  # type: ignore[no-untyped-def]
    """On a Redis Cluster: an earlier name and a name under another prefix, on each primary
    and for a stream with a hash tag, refuse the run (HLEN routed to each key's primary);
    the commands they name run there (the keys share a slot) and the run may go on."""
    redis_cluster.wait_healthy()
    redis_cluster.flush()
    rc = connect(RedisParams(redis_cluster.url))
    streams = [*keys_on_every_primary(redis_cluster.client(), 1, prefix="moved"), "t{eu}:o"]
    units = [WorkUnit(s, GROUP, 1) for s in streams]
    for stream in streams:
        rc.hset(earlier_hold_key("recovery:held:", stream, GROUP), "k0", "1-0 2-0")
        rc.hset(hold_key("old:", stream, GROUP), "k1", "3-0 4-0")
    rc.sadd(HOLD_PREFIXES, "old:")
    for _ in range(2 * len(streams)):
        with pytest.raises(HeldElsewhereError) as refused:
            refuse(rc, _params("recovery:held:", *streams), units, False)
        rc.execute_command(*_move_command(str(refused.value)))
    refuse(rc, _params("recovery:held:", *streams), units, False)
    for stream in streams:
        assert rc.hgetall(hold_key("recovery:held:", stream, GROUP)) == {
            b"k0": b"1-0 2-0", b"k1": b"3-0 4-0"}
    rc.close()
