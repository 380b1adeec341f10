"""Attacks on the set of hold prefixes (``recovery:held:prefixes``) that every run with
``order.dead_letter_releases = false`` reads before it claims anything: a key of a team's
own at that name, members the job never wrote. Each test checks Redis afterwards: the PEL,
the set, the hashes of held keys.
"""

from __future__ import annotations

import re
import shlex
import subprocess

import pytest
from redis import Redis, ResponseError

from recovery.driver.ordered import move_holds_command
from recovery.redis_io.key_holds import HOLD_PREFIXES, earlier_hold_key, hold_key
from recovery.testing.backlog import add_entries, create_group, deliver, make_stuck
from tests.support.backlogs import DEAD, HOUR_MS
from tests.support.fault_tools import GROUP, run_in_process, write_control
from tests.support.order_tools import HANDLER
from tests.support.servers import ON_ONE_SERVER

ODD = "it's a\nstream \"x\" $HOME `id`"


def _seed(client: Redis, stream: str) -> list[str]:
    """Two entries of keys k0, k1 in `stream`, stuck an hour on a dead consumer."""
    create_group(client, stream, GROUP)
    ids = add_entries(client, stream, 2, lambda i: {"k": f"k{i}"})
    assert deliver(client, stream, GROUP, DEAD, 2) == ids
    make_stuck(client, stream, GROUP, DEAD, ids, HOUR_MS)
    return ids


def _argv(url: str, reports: object, stream: str) -> list[str]:
    sets = [f"redis.url={url}", f"report.path={reports}", f"streams.keys={stream}",
            "claim.max_deliveries=5", HANDLER, "order.key_field=k",
            "order.dead_letter_releases=false"]
    return [a for s in sets for a in ("--set", s)]


def _pel(client: Redis, stream: str) -> list[tuple[bytes, bytes, int]]:
    return [(r["message_id"], r["consumer"], r["times_delivered"])
            for r in client.xpending_range(stream, GROUP, "-", "+", 99)]


@pytest.mark.slow
@ON_ONE_SERVER  # plain SMEMBERS and TYPE; holds on every server: test_attack_hold.py
def test_a_teams_hash_at_the_prefixes_name_is_refused_by_name(spark, server, tmp_path
                                                              ) -> None:  # type: ignore[no-untyped-def]
    """Finding: a key of another type at ``recovery:held:prefixes`` (a team's own hash)
    failed the run with exit 1 and a bare ``WRONGTYPE ...``, naming neither the key nor the
    fix. Now it is refused (exit 2) with a one-line error naming the key; the key, the PEL
    and the stream are left as they were."""
    client = server.client()
    write_control(server.url)
    _seed(client, "orders")
    client.hset(HOLD_PREFIXES, "team", "x")
    before = _pel(client, "orders")
    result = run_in_process(spark, _argv(server.url, tmp_path / "r", "orders"))
    assert result.code == 2, (result.code, result.summary)
    error = result.summary["error"]
    assert repr(HOLD_PREFIXES) in error and "hash" in error and "\n" not in error, error
    assert client.hgetall(HOLD_PREFIXES) == {b"team": b"x"}
    assert _pel(client, "orders") == before
    assert client.keys("recovery:held:{*") == []


@pytest.mark.slow
def test_a_member_not_utf8_refuses_the_run_not_crashes(spark, redis_server, tmp_path
                                                        ) -> None:  # type: ignore[no-untyped-def]
    """Finding: a member of ``recovery:held:prefixes`` that is not UTF-8 (never one the job
    writes: a team's member, a bad restore) crashed the run, exit 1, "the job failed
    unexpectedly: UnicodeDecodeError". Holds may sit under a prefix the run cannot name,
    so it is refused (exit 2), naming the member and the SREM that drops it; nothing is
    claimed or written."""
    client = redis_server.client()
    write_control(redis_server.url)
    _seed(client, "orders")
    client.sadd(HOLD_PREFIXES, b"\xff\xfe:")
    before = _pel(client, "orders")
    result = run_in_process(spark, _argv(redis_server.url, tmp_path / "r", "orders"))
    assert result.code == 2, (result.code, result.summary, result.stderr[-2000:])
    error = result.summary["error"]
    assert "\\xff\\xfe:" in error and "SREM" in error and "Unicode" not in error, error
    assert client.smembers(HOLD_PREFIXES) == {b"\xff\xfe:"}
    assert _pel(client, "orders") == before


@pytest.mark.slow
def test_the_printed_move_command_run_as_printed_moves_odd_names(spark, redis_server, tmp_path
                                                                 ) -> None:  # type: ignore[no-untyped-def]
    """Not a finding (kept as a guard): a hold under another recorded prefix, stream name
    with quotes, a newline, ``$HOME`` and backquotes. The refusal's command, pasted into
    bash (only ``-p <port>`` added: the test server's port), moves the hold into the hash
    this run reads and deletes the old one; nothing else is touched, nothing is run by the
    shell."""
    client = redis_server.client()
    write_control(redis_server.url)
    ids = _seed(client, ODD)
    old = hold_key("team:held:", ODD, GROUP)
    client.hset(old, "k0", f"0-1 {ids[0]}")
    client.sadd(HOLD_PREFIXES, "team:held:")
    result = run_in_process(spark, _argv(redis_server.url, tmp_path / "r", ODD))
    assert result.code == 2, (result.code, result.summary)
    found = re.search(r"reads: (redis-cli EVAL .*?); docs/", result.summary["error"], re.S)
    assert found is not None, result.summary
    command = found.group(1).replace("redis-cli", f"redis-cli -p {redis_server.port}", 1)
    done = subprocess.run(["bash", "-c", command], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "1" and not done.stderr, done
    assert not client.exists(old)
    assert client.hgetall(hold_key("recovery:held:", ODD, GROUP)) == {
        b"k0": f"0-1 {ids[0]}".encode()}
    assert set(client.keys("*held*")) == {
        hold_key("recovery:held:", ODD, GROUP).encode(), HOLD_PREFIXES.encode()}


@pytest.mark.slow
@ON_ONE_SERVER  # the move's refusal on every server: test_attack_hold.py's users' hash test
def test_a_teams_hash_at_an_earlier_holds_name_is_no_hold_and_never_moved(
        spark, server, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Finding: the refusal counted any hash with fields (HLEN) at a name where holds may
    be (an earlier version's name, another recorded prefix's), so a team's own hash there
    (``recovery:held:{orders}:g``, values not ``<head ID> <dead-letter ID>``) refused every
    run (exit 2), and the move command it printed, run as printed, copied the team's fields
    into the job's hash of held keys and deleted the team's hash. Now such a hash is not
    the job's (the rule ``dead_letter.lua`` applies: a value read at random is no hold):
    the run goes on, and the move script refuses it, writing nothing."""
    client = server.client()
    write_control(server.url)
    _seed(client, "orders")
    team = earlier_hold_key("recovery:held:", "orders", GROUP)
    client.hset(team, mapping={"owner": "alice", "since": "2024"})
    target = hold_key("recovery:held:", "orders", GROUP)
    command = shlex.split(move_holds_command(team, [target]))
    with pytest.raises(ResponseError):
        client.execute_command(*command[1:])
    assert client.hgetall(team) == {b"owner": b"alice", b"since": b"2024"}
    assert not client.exists(target)
    result = run_in_process(spark, _argv(server.url, tmp_path / "r", "orders"))
    assert result.code == 0, (result.code, result.summary)
    assert client.hgetall(team) == {b"owner": b"alice", b"since": b"2024"}
    assert _pel(client, "orders") == []
