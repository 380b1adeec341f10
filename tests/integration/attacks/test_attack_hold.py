"""Attacks on keys held across runs behind a dead-lettered head (issue 63,
``order.dead_letter_releases = false``): the hold written inside ``dead_letter.lua``'s move,
read by every ordered hand-over. Each test checks Redis itself afterwards: the PEL, the
dead-letter stream, the hash of held keys.
"""

from __future__ import annotations

import re
import shlex
import threading
import time
from itertools import product

import pytest
from redis import Redis, ResponseError
from redis.crc import key_slot

from recovery.errors import DeadLetterNameError
from recovery.params import RedisParams
from recovery.redis_io.acl_errors import denied_command
from recovery.redis_io.dlq_names import dead_letter_key
from recovery.redis_io.held_keys import pending_elsewhere
from recovery.redis_io.key_holds import HOLD_PREFIXES, earlier_hold_key, hold_key
from recovery.redis_io.redis_conn import connect
from recovery.redis_io.scripts import DeadLetter, DeadLetterContext, dead_letter_units
from recovery.testing.backlog import add_entries, create_group, deliver, make_stuck
from tests.support.acl_rules import PASSWORD, create_users, refusals, setinfo_refusal
from tests.support.backlogs import DEAD, HOUR_MS
from tests.support.fault_tools import GROUP, run_in_process, write_control
from tests.support.order_handler import DONE, REJECT, SEEN
from tests.support.order_tools import STREAM as ORDERS
from tests.support.order_tools import age, args, pending_owners, recorded, rows_of
from tests.support.servers import ON_NEWEST_TOO, ON_ONE_SERVER, WITH_XACKDEL

STREAM = "events:orders"
DLQ = dead_letter_key(STREAM, ":dlq")
HELD = hold_key("recovery:held:", STREAM, GROUP)


def _pending(client: Redis, n: int, fields: dict[str, str] | None = None) -> list[str]:
    """`n` entries of key k0 delivered to consumer ``c`` of `GROUP`."""
    create_group(client, STREAM, GROUP)
    ids = add_entries(client, STREAM, n, lambda i: fields or {"k": "k0", "n": str(i)})
    assert deliver(client, STREAM, GROUP, "c", n) == ids
    return ids


def _move(job: Redis, entry_id: str, key: bytes) -> object:
    """Dead-letter `entry_id` (consumer ``c``) holding `key`, as the ordered hand-over does."""
    ctx = DeadLetterContext(STREAM, GROUP, "c", DLQ, "run-t", 5, int(time.time() * 1000),
                            hold_key=HELD)
    [reply] = dead_letter_units(job, [(ctx, [DeadLetter(entry_id, 6, 1, "", "r", None, key)])])
    return reply


@ON_NEWEST_TOO
def test_a_user_who_may_not_write_the_holds_loses_no_hold(server) -> None:  # type: ignore[no-untyped-def]
    """Finding: a job user granted the holds' keys but not HSETNX (docs/ACL.md line 12 with
    its reads only; a key pattern refused fails before the script runs): the move script
    XADDed the letter and XACKed the head, then its HSETNX was refused, and a script's
    writes are never rolled back: the head left the PEL with no hold recorded, so the key
    was silently released and the next run handed its later entries over past a lost
    event. The refusal must leave the head pending (the key still held by it) and name the
    missing grant."""
    admin = server.client()
    create_users(admin, without="~recovery:held:*")
    admin.execute_command("ACL", "SETUSER", "recovery", "~recovery:held:*", "+hmget",
                          "+hgetall", "+hlen")  # the holds' keys, but no HSETNX
    [head, _later] = _pending(admin, 2)
    job = connect(RedisParams(server.url, username="recovery", password=PASSWORD))
    with pytest.raises(ResponseError) as refused:
        _move(job, head, b"k0")
    assert denied_command(str(refused.value)) == "hsetnx", refused.value  # the fix it names
    pending = [r["message_id"].decode() for r in admin.xpending_range(STREAM, GROUP, "-", "+", 9)]
    assert head in pending and not admin.hgetall(HELD)  # nothing of the unit was acked
    checks = admin.eval("if redis.acl_check_cmd then return 1 end return 0", 0)
    assert admin.xlen(DLQ) == (0 if checks else 1)  # 6.2: the letter, a rerun's duplicate
    job.close()


@pytest.mark.slow
@ON_ONE_SERVER  # holds across runs on every server: test_binary_and_long_keys_are_held_as_they_are
def test_an_empty_key_dead_lettered_holds_its_key_across_runs(spark, server, tmp_path
                                                              ) -> None:  # type: ignore[no-untyped-def]
    """Finding: an entry whose key field is present but empty (``k = ""``) is a key of its
    own (``key_of``: b"", not None), held behind its head in the run; but the move script
    took an empty key argument for "no key" and recorded no hold, so the next run handed the
    key's later entries over past the dead-lettered head."""
    client = server.client()
    write_control(server.url)
    create_group(client, ORDERS, GROUP)
    ids = add_entries(client, ORDERS, 3, lambda i: {"k": "", "n": str(i)})
    assert deliver(client, ORDERS, GROUP, DEAD, 3) == ids
    make_stuck(client, ORDERS, GROUP, DEAD, ids, HOUR_MS)
    client.sadd(REJECT, ids[0])
    sets = args(server.url, tmp_path / "r", "order.dead_letter_releases=false")
    first = run_in_process(spark, sets)
    assert first.code == 0, first.stderr[-3000:]
    held = hold_key("recovery:held:", ORDERS, GROUP)
    [(letter, _)] = client.xrange(dead_letter_key(ORDERS, ":dlq"))
    assert client.hgetall(held) == {b"": f"{ids[0]} {letter.decode()}".encode()}
    assert set(pending_owners(client)) == set(ids[1:])
    age(client, ids[1:])
    second = run_in_process(spark, sets)
    assert second.code == 0, second.stderr[-3000:]
    assert recorded(client, DONE, ["-"])["-"] == []
    assert set(pending_owners(client)) == set(ids[1:])


def test_a_consumer_appearing_on_every_read_holds_the_group_not_nothing(server) -> None:  # type: ignore[no-untyped-def]
    """Finding: ``pending_elsewhere`` retakes its snapshot while new consumers with pending
    entries appear; after SNAPSHOT_TRIES it went on without them and said all was read (no
    bound), so an older entry of a key, pending on such a consumer, held nothing back. Here
    another tool moves one old entry to a new consumer name as fast as it can: the read must
    either see that entry or return a bound that holds every later entry of the group."""
    client = connect(RedisParams(server.url))
    [old] = _pending(client, 1)
    stop = threading.Event()

    def steal() -> None:
        thief = server.client()
        n = 0
        while not stop.is_set():
            n += 1
            thief.xclaim(STREAM, GROUP, f"tool-{n}", 0, [old], justid=True)
        thief.close()

    worker = threading.Thread(target=steal, daemon=True)
    worker.start()
    try:
        time.sleep(0.05)
        entries, bound = pending_elsewhere(client, STREAM, GROUP, [], 10, "recovery-r1-")
    finally:
        stop.set()
        worker.join()
    assert old in [i for i, _, _ in entries] or bound is not None, (entries, bound)
    client.close()


def test_a_users_hash_where_the_holds_belong_is_never_written(client: Redis) -> None:
    """Finding: the move script took any hash at the hold's name for the job's own and
    HSETNX'd the held key into it (a team's hash under ``order.hold_prefix``, e.g. one of
    its own ``recovery:held:...`` records). Like a dead-letter stream whose oldest entry
    carries no metadata, a hash whose values are not ``<head ID> <dead-letter ID>`` is not
    the job's: nothing of the unit is written or acked, the head stays pending."""
    [head, _later] = _pending(client, 2)
    client.hset(HELD, mapping={"owner": "alice", "note": "keep"})
    refused = _move(client, head, b"k0")
    assert isinstance(refused, ResponseError) and "NOTLETTERS hold:hash" in str(refused)
    assert client.hgetall(HELD) == {b"owner": b"alice", b"note": b"keep"}
    assert not client.exists(DLQ)
    assert client.xpending(STREAM, GROUP)["pending"] == 2


def test_the_documented_user_may_check_a_hash_of_holds_it_wrote(server) -> None:  # type: ignore[no-untyped-def]
    """docs/ACL.md's recovery user moves a second head into the hash its first move wrote
    (TYPE, HRANDFIELD of the existing hash, HSETNX): accepted, both keys held, nothing
    refused in the ACL LOG but redis-py's CLIENT SETINFO."""
    admin = server.client()
    create_users(admin)
    create_group(admin, STREAM, GROUP)
    ids = add_entries(admin, STREAM, 2, lambda i: {"k": f"k{i}"})
    assert deliver(admin, STREAM, GROUP, "c", 2) == ids
    job = connect(RedisParams(server.url, username="recovery", password=PASSWORD))
    for entry_id, key in zip(ids, (b"k0", b"k1"), strict=True):
        [letter] = _move(job, entry_id, key)  # type: ignore[misc]
        assert isinstance(letter, bytes)
    assert sorted(admin.hgetall(HELD)) == [b"k0", b"k1"]
    assert refusals(admin) <= {setinfo_refusal(admin)}
    job.close()


def test_two_units_never_share_a_hash_of_held_keys() -> None:
    """Finding: stream ``a`` was wrapped (``{a}``) and stream ``{a}`` kept its tag, and
    ``:`` joined stream and group, so two units shared a hash and a key held in one held it
    in the other. Every (prefix, stream, group) over an alphabet of the characters that
    matter (braces, ``:``, the separator ``/``, the escape ``%``) gets a name of its own,
    in its stream's slot, and none is a name earlier versions gave (those are still looked
    at: a new hold there would be read as another unit's earlier one)."""
    pairs = [(("a", "g"), ("{a}", "g")), (("x{eu}", "g:h"), ("x{eu}:g", "h")),
             (("a/b", "g"), ("a", "b/g")), (("x{eu}", "g/h"), ("x{eu}/g", "h")),
             (("a%2Fb", "g"), ("a/b", "g")), (("x{a{b}", "g"), ("a{b", "g"))]
    for one, other in pairs:
        assert hold_key("recovery:held:", *one) != hold_key("recovery:held:", *other)
    alphabet = "a{}:/%"
    texts = [""] + ["".join(t) for n in range(1, 5) for t in product(alphabet, repeat=n)]
    names: dict[str, tuple[str, str, str]] = {}
    earlier: set[str] = set()
    for prefix in ("p:", "p:a"):
        for stream in texts:
            for group in texts[:43]:  # groups of up to two characters
                try:
                    name = hold_key(prefix, stream, group)
                except DeadLetterNameError:
                    continue
                assert names.setdefault(name, (prefix, stream, group)) == (
                    prefix, stream, group), name
                assert key_slot(name.encode()) == key_slot(stream.encode())
                earlier.add(earlier_hold_key(prefix, stream, group))
    assert len(names) > 1000 and not earlier & names.keys()


def _pel_and_seen(client: Redis) -> tuple[list[tuple[str, str, int]], dict[str, list[str]]]:
    """`ORDERS`' PEL (ID, owner, delivery count) and what the handler saw of k0 and k1."""
    pel = [(r["message_id"].decode(), r["consumer"].decode(), r["times_delivered"])
           for r in client.xpending_range(ORDERS, GROUP, "-", "+", 99)]
    return pel, recorded(client, SEEN, ["k0", "k1"])


@pytest.mark.slow
@ON_ONE_SERVER  # holds across runs on every server: test_binary_and_long_keys_are_held_as_they_are
def test_holds_left_where_a_run_would_not_read_them_hand_nothing_over(spark, server, tmp_path
                                                                      ) -> None:  # type: ignore[no-untyped-def]
    """Finding: a hold recorded under the name an earlier version gave the hash, or under
    an ``order.hold_prefix`` since changed, was not read, so the run handed the held key's
    later entries over past its lost head. Now each run is refused (exit 2) before it
    claims anything, and the command it names moves the holds; the next run holds the key.
    The handler never sees an entry of k0; its entries stay pending, counts unchanged."""
    client = server.client()
    write_control(server.url)
    create_group(client, ORDERS, GROUP)
    ids = add_entries(client, ORDERS, 4, lambda i: {"k": f"k{i % 2}"})
    assert deliver(client, ORDERS, GROUP, DEAD, 4) == ids
    make_stuck(client, ORDERS, GROUP, DEAD, ids, HOUR_MS)
    k0, k1 = ids[0::2], ids[1::2]
    old = earlier_hold_key("recovery:held:", ORDERS, GROUP)  # as an earlier version left it
    client.hset(old, "k0", f"0-1 {k0[0]}")
    sets = args(server.url, tmp_path / "r", "order.dead_letter_releases=false")
    moved = "team:held:"
    for prefix, found in (("recovery:held:", old),
                          (moved, hold_key("recovery:held:", ORDERS, GROUP))):
        before = _pel_and_seen(client)
        for dry in ([], ["--dry-run"]):
            refused = run_in_process(spark, [*sets, *dry, "--set", f"order.hold_prefix={prefix}"])
            assert refused.code == 2, (refused.code, refused.stderr[-3000:])
            assert repr(found) in refused.summary["error"], refused.summary
        assert _pel_and_seen(client) == before
        assert before[1]["k0"] == []
        error = refused.summary["error"]
        command = shlex.split(re.search(r"reads: (redis-cli EVAL .*?); docs/",
                                        error).group(1))  # type: ignore[union-attr]
        client.execute_command(*command[1:])
        age(client, k0)
        result = run_in_process(spark, [*sets, "--set", f"order.hold_prefix={prefix}"])
        assert result.code == 0, result.stderr[-3000:]
        assert recorded(client, SEEN, ["k0"]) == {"k0": []}
        assert set(pending_owners(client)) == set(k0)
        rows = rows_of(spark, tmp_path / "r", result.summary)
        held = hold_key(prefix, ORDERS, GROUP)
        assert all(repr(held) in rows[i]["reason"] for i in k0), rows
        assert client.hgetall(held) == {b"k0": f"0-1 {k0[0]}".encode()}
    assert recorded(client, DONE, ["k1"]) == {"k1": k1}
    assert client.smembers(HOLD_PREFIXES) == {b"recovery:held:", moved.encode()}


@pytest.mark.slow
@pytest.mark.parametrize("server", [WITH_XACKDEL], indirect=True)
def test_holds_with_delete_acked_on_the_newest_redis(spark, server, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """``reprocess.delete_acked`` (XACKDEL ... ACKED in the same move) with holds, through
    ``streams.match`` (which also finds the hash of held keys and the dead-letter stream):
    the dry run predicts what the run holds; the head leaves the stream into the dead-letter
    stream, its key is recorded, its later entries stay pending and in the stream, run
    after run; the other key is handled and deleted."""
    client = server.client()
    write_control(server.url)
    create_group(client, ORDERS, GROUP)
    ids = add_entries(client, ORDERS, 5, lambda i: {"k": f"k{i % 2}", "n": str(i)})
    assert deliver(client, ORDERS, GROUP, DEAD, 5) == ids
    make_stuck(client, ORDERS, GROUP, DEAD, ids, HOUR_MS)
    k0, k1 = ids[0::2], ids[1::2]
    client.xclaim(ORDERS, GROUP, DEAD, 0, k0[:1], idle=HOUR_MS, retrycount=9, justid=True)
    sets = [a if a != f"streams.keys={ORDERS}" else "streams.match=*" for a in args(
        server.url, tmp_path / "r", "order.dead_letter_releases=false",
        "reprocess.delete_acked=true")]
    dry = run_in_process(spark, [*sets, "--dry-run"])
    assert dry.code == 0, dry.stderr[-3000:]
    assert dry.summary["totals"]["would_hold"] == 2, dry.summary["totals"]
    held = hold_key("recovery:held:", ORDERS, GROUP)
    for _ in range(2):
        result = run_in_process(spark, sets)
        assert result.code == 0, result.stderr[-3000:]
        [(letter, fields)] = client.xrange(dead_letter_key(ORDERS, ":dlq"))
        assert fields[b"x-original-id"].decode() == k0[0]
        assert client.hgetall(held) == {b"k0": f"{k0[0]} {letter.decode()}".encode()}
        assert set(pending_owners(client)) == set(k0[1:])
        assert [i.decode() for i, _ in client.xrange(ORDERS)] == k0[1:]
        assert recorded(client, DONE, ["k0", "k1"]) == {"k0": [], "k1": k1}
        age(client, k0[1:])


def test_a_hold_named_as_its_dead_letter_stream_is_refused_untouched(client: Redis) -> None:
    """Finding: a dead-letter template naming the unit's hash of held keys
    (``dead_letter.stream = "recovery:held:{{{stream}}}:{group}"``): both missing, the move
    XADDed the letter, creating a stream at the hold's name, and its HSETNX then failed
    WRONGTYPE mid-call (a letter written, the call failed). The hold must be refused before
    anything is written."""
    [head] = _pending(client, 1)
    ctx = DeadLetterContext(STREAM, GROUP, "c", HELD, "run-t", 5, int(time.time() * 1000),
                            hold_key=HELD)
    [refused] = dead_letter_units(client, [(ctx, [DeadLetter(head, 6, 1, "", "r", None,
                                                              b"k0")])])
    assert isinstance(refused, ResponseError) and "NOTLETTERS hold:" in str(refused), refused
    assert not client.exists(HELD)
    assert client.xpending(STREAM, GROUP)["pending"] == 1


@pytest.mark.slow  # on every server of FLAVORS: the ordered run that holds keys across runs
def test_binary_and_long_keys_are_held_as_they_are(spark, server, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Keys that are not UTF-8 and a 64 KiB key, each head over the delivery limit: the dry
    run predicts the holds, the run records each key byte for byte, and the next run hands
    none of their later entries over."""
    client = server.client()
    write_control(server.url)
    keys = [b"\xff\xfe\x00k", b"L" * 65536]
    create_group(client, ORDERS, GROUP)
    ids = add_entries(client, ORDERS, 4, lambda i: {b"k": keys[i % 2], b"n": str(i)})
    assert deliver(client, ORDERS, GROUP, DEAD, 4) == ids
    make_stuck(client, ORDERS, GROUP, DEAD, ids, HOUR_MS)
    client.xclaim(ORDERS, GROUP, DEAD, 0, ids[:2], idle=HOUR_MS, retrycount=9, justid=True)
    sets = args(server.url, tmp_path / "r", "order.dead_letter_releases=false")
    dry = run_in_process(spark, [*sets, "--dry-run"])
    assert dry.code == 0 and dry.summary["totals"]["would_hold"] == 2, dry.summary
    held = hold_key("recovery:held:", ORDERS, GROUP)
    for _ in range(2):
        result = run_in_process(spark, sets)
        assert result.code == 0, result.stderr[-3000:]
        letters = {f[b"x-original-id"].decode(): i.decode()
                   for i, f in client.xrange(dead_letter_key(ORDERS, ":dlq"))}
        assert client.hgetall(held) == {k: f"{h} {letters[h]}".encode()
                                        for k, h in zip(keys, ids[:2], strict=True)}
        assert set(pending_owners(client)) == set(ids[2:])
        age(client, ids[2:])


@pytest.mark.slow
def test_a_user_refused_hmget_stops_before_any_hand_over(spark, redis_server, tmp_path
                                                         ) -> None:  # type: ignore[no-untyped-def]
    """The documented user without HMGET (the holds unreadable): the run must stop with the
    grant named, having handed nothing over, acked nothing, dead-lettered nothing."""
    client = redis_server.client()
    write_control(redis_server.url)
    create_users(client)
    client.execute_command("ACL", "SETUSER", "recovery", "-hmget")
    create_group(client, STREAM, GROUP)
    ids = add_entries(client, STREAM, 4, lambda i: {"k": f"k{i % 2}"})
    assert deliver(client, STREAM, GROUP, DEAD, 4) == ids
    make_stuck(client, STREAM, GROUP, DEAD, ids, HOUR_MS)
    client.xclaim(STREAM, GROUP, DEAD, 0, ids[:1], idle=HOUR_MS, retrycount=9, justid=True)
    sets = [a.replace(f"streams.keys={ORDERS}", f"streams.keys={STREAM}") for a in args(
        redis_server.url, tmp_path / "r", "order.dead_letter_releases=false",
        "redis.username=recovery", f"redis.password={PASSWORD}")]
    result = run_in_process(spark, sets)
    assert result.code == 1, (result.code, result.stderr[-3000:])
    assert "hmget" in result.stderr, result.stderr[-3000:]
    assert client.xpending(STREAM, GROUP)["pending"] == 4
    assert not client.exists(DLQ) and not client.exists(HELD)
    assert client.lrange(SEEN + "k0", 0, -1) == client.lrange(SEEN + "k1", 0, -1) == []


@pytest.mark.slow
@ON_ONE_SERVER  # the script's refusal on every server: test_a_users_hash_where_the_holds_belong_...
def test_a_run_leaves_a_users_hash_at_the_holds_name_alone(spark, server, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Through the command: a team's hash where the hold belongs; k0's head over the limit
    stays pending, reported with the fix, k0's later entries held; the hash is unchanged;
    k1 is handled."""
    client = server.client()
    write_control(server.url)
    create_group(client, ORDERS, GROUP)
    ids = add_entries(client, ORDERS, 4, lambda i: {"k": f"k{i % 2}"})
    assert deliver(client, ORDERS, GROUP, DEAD, 4) == ids
    make_stuck(client, ORDERS, GROUP, DEAD, ids, HOUR_MS)
    client.xclaim(ORDERS, GROUP, DEAD, 0, ids[:1], idle=HOUR_MS, retrycount=9, justid=True)
    held = hold_key("recovery:held:", ORDERS, GROUP)
    client.hset(held, "owner", "alice")
    result = run_in_process(spark, args(server.url, tmp_path / "r",
                                        "order.dead_letter_releases=false"))
    assert client.hgetall(held) == {b"owner": b"alice"}
    assert not client.exists(dead_letter_key(ORDERS, ":dlq"))
    assert set(pending_owners(client)) == {ids[0], ids[2]}
    assert recorded(client, DONE, ["k0", "k1"]) == {"k0": [], "k1": ids[1::2]}
    rows = rows_of(spark, tmp_path / "r", result.summary)
    assert "not the job's hash of held keys" in rows[ids[0]]["reason"], rows[ids[0]]
    assert rows[ids[2]]["action"] == "held"
    assert result.code in (0, 3), (result.code, result.stderr[-2000:])
