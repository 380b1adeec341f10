"""The least-privilege ACL rules of docs/ACL.md, applied to real servers.

The rules are read from docs/ACL.md itself, so the documentation cannot drift from what the
job needs: the job runs end to end (dry run, run, a second run that removes its empty
consumer, redrive) as those users on Redis 7.0, Valkey 8.1, Redis 6.2 and a Redis Cluster,
and the servers' ACL LOG shows no refusal but the ones expected. With one permission taken
away, the job stops with one line naming it (recovery.redis_io.acl_errors finds the command,
also inside the job's scripts).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from redis import Redis

from recovery.dead_letters.retention import apply_retention
from recovery.dead_letters.run import find_dead_letter_streams
from recovery.errors import RedisPermissionError
from recovery.jobs.dead_letters import DeadLettersJob
from recovery.jobs.recover import RecoverJob
from recovery.jobs.redrive import RedriveJob
from recovery.settings.model import load_settings, redis_params
from recovery.testing.local_redis import LocalServer
from tests.support.acl_rules import PASSWORD, documented_rules, refused_object, setinfo_refusal
from tests.support.backlogs import DEAD, LIVE, Seeded, seed
from tests.support.cluster_fixtures import LocalCluster
from tests.support.invariants import dead_letters, final_states, pel

pytestmark = pytest.mark.slow  # whole Spark runs as the documented users

STREAMS = ["events:orders", "events:{eu}:pay"]
OUTSIDE = "other"  # a stream the users may not touch


def create_users(nodes: list[Redis], *extra: str, without: str | None = None,
                 dropping: str | None = None) -> None:
    """The documented users on every node (ACLs are per node), `extra` added to recovery,
    leaving out the documented lines that hold the word `without` and the word `dropping`
    wherever it appears (Redis 6.2 cannot take back a subcommand: ``-xinfo|stream``)."""
    for node in nodes:
        for lines in documented_rules().values():
            for args in lines:
                if without is None or without not in args:
                    node.execute_command("ACL", "SETUSER", *(a for a in args if a != dropping))
        if extra:
            node.execute_command("ACL", "SETUSER", "recovery", *extra)
        node.execute_command("ACL", "LOG", "RESET")


def refusals(nodes: list[Redis]) -> set[tuple[str, str, str]]:
    """(user, reason, object) of every ACL LOG entry on `nodes`."""
    return {(e["username"], e["reason"], e["object"]) for n in nodes for e in n.acl_log()}


def job_args(url: str, user: str, tmp_path: Path, *extra: str) -> list[str]:
    sets = [f"redis.url={url}", f"redis.username={user}", f"redis.password={PASSWORD}",
            f"report.path={tmp_path / 'reports'}", "claim.count=7",
            "claim.min_idle_ms=600000", "handler.path=tests.support.handlers:verify_or_fail",
            *extra]
    return [arg for s in sets for arg in ("--set", s)]


def seed_with_outsider(client: Redis) -> Seeded:
    seeded = seed(client, STREAMS, ["billing"])
    seed(client, [OUTSIDE], ["billing"])
    return seeded


def assert_recovered(client: Redis, seeded: Seeded) -> None:
    """Every seeded entry (but the ones deleted upstream) ends as the seed says, read from
    Redis; one the job keeps pending may be any job consumer's."""
    expected = {k: v for k, v in seeded.state.items() if v != "gone"}
    states = {k: "pending:job" if v.startswith("pending:recovery-") else v
              for k, v in final_states(client, expected).items()}
    assert states == expected


def run_as_documented_users(spark, url: str, client: Redis, nodes: list[Redis],
                            tmp_path: Path, capsys) -> None:
    """Dry run, the run that applies its plan (--plan), a run, a second run, redrive: all
    exit 0; Redis as expected after each."""
    seeded = seed_with_outsider(client)
    recover = job_args(url, "recovery", tmp_path, "streams.match=*")
    assert RecoverJob(lambda s: spark).main([*recover, "--dry-run"]) == 0, capsys.readouterr()
    plan = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["report_path"]
    assert RecoverJob(lambda s: spark).main([*recover, "--plan", plan]) == 0, capsys.readouterr()
    applied = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert applied["totals"]["reprocessed"] > 0 and applied["totals"]["skipped"] == 0, applied
    assert RecoverJob(lambda s: spark).main(recover) == 0, capsys.readouterr()
    assert '"reason":"the Redis user may not access this key' in capsys.readouterr().out
    assert_recovered(client, seeded)
    assert len(pel(client, OUTSIDE, "billing")) == 166  # left alone

    assert RecoverJob(lambda s: spark).main(recover) == 0, capsys.readouterr()
    for stream in STREAMS:  # the 2nd run's consumer owned nothing: removed (a script)
        names = {c["name"].decode() for c in client.xinfo_consumers(stream, "billing")}
        assert len([n for n in names if n.startswith("recovery-")]) == 1, names

    # The dead-letter read as the recovery user, and its warning (the other DLQ: denied).
    letters = job_args(url, "recovery", tmp_path, "streams.match=*",
                       "dead_letters.warn_length=1")
    assert DeadLettersJob(lambda _: spark).main(letters) == 0, capsys.readouterr()
    read = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert read["totals"]["dead_letters"] == sum(len(dead_letters(client, s)) for s in STREAMS)
    assert {w["stream"] for w in read["dead_letter_warnings"]} == set(STREAMS)
    assert [s["stream"] for s in read["skipped"]] == [OUTSIDE]

    redrive = job_args(url, "redrive", tmp_path, "streams.match=events:*")
    assert RedriveJob().main(redrive) == 0, capsys.readouterr()
    assert all(dead_letters(client, s) == [] for s in STREAMS)
    # redis-py's CLIENT SETINFO on connecting (it goes on without): refused before 7.2,
    # which has no such subcommand.
    allowed = {("recovery", "key", OUTSIDE), ("recovery", "key", f"{{{OUTSIDE}}}:dlq")}
    allowed |= {setinfo_refusal(client, u) for u in ("recovery", "redrive")}
    assert refusals(nodes) <= allowed


def test_without_the_journal_line_the_job_materialises_the_claim(spark, redis_server, tmp_path,
                                                                 capsys, caplog):
    """docs/ACL.md line 8 is optional: without it a run on a master that retries tasks (the
    test session's) is refused the journal once, says so, and takes the materialised path."""
    client = redis_server.client()
    create_users([client], without="+rpush")
    seeded = seed(client, STREAMS, ["billing"])
    recover = job_args(redis_server.url, "recovery", tmp_path, "streams.match=events:*")
    caplog.set_level(logging.INFO, logger="recovery")
    assert RecoverJob(lambda s: spark).main(recover) == 0, capsys.readouterr()
    assert "the claim is materialised" in caplog.text and "journaled" not in caplog.text
    assert_recovered(client, seeded)
    assert refusals([client]) - {setinfo_refusal(client)} == {
        ("recovery", "command", c) for c in ("rpush", "expire", "lrange")}
    assert client.keys("recovery:journal:*") == []


def test_rules_without_xinfo_stream_still_run_with_the_reads_it_replaces(
        spark, redis_version_server, tmp_path, capsys):
    """Rules pasted before docs/ACL.md line 3 granted XINFO STREAM: discovery is refused it
    once (one read, one ACL LOG entry), reads XINFO GROUPS, XINFO CONSUMERS and XLEN
    instead, and the run recovers everything, its health rows as full as ever."""
    client = redis_version_server.client()
    create_users([client], dropping="+xinfo|stream")
    seeded = seed(client, STREAMS, ["billing"])
    recover = job_args(redis_version_server.url, "recovery", tmp_path, "streams.match=events:*")
    assert RecoverJob(lambda s: spark).main(recover) == 0, capsys.readouterr()
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    health = spark.read.parquet(report["health_path"]).collect()
    assert sorted((h["stream"], h["length"], sorted(c["name"] for c in h["consumers"]))
                  for h in health) == [(s, 158, [DEAD, LIVE]) for s in sorted(STREAMS)]
    assert_recovered(client, seeded)
    refused = [(e["object"], int(e["count"])) for e in client.acl_log()
               if e["object"] in ("xinfo", "xinfo|stream")]
    assert refused == [(refused_object(client, "xinfo", "stream"), 1)]


@pytest.fixture
def acl_server(server: LocalServer) -> Iterator[LocalServer]:
    create_users([server.client()])
    yield server


def test_documented_users_run_everything_on_one_server(spark, acl_server, tmp_path, capsys):
    client = acl_server.client()
    run_as_documented_users(spark, acl_server.url, client, [client], tmp_path, capsys)


@pytest.mark.parametrize(("mode", "schedule"), [
    ("requeue", ()), ("reassign", ()), ("handler", ("claim.backoff_factor=2",)),
], ids=["requeue", "reassign", "backoff"])
def test_the_reprocess_modes_need_nothing_more_than_the_documented_rule(
        spark, redis_version_server, tmp_path, capsys, mode, schedule):
    """README "ACL": requeue into the source stream, reassign and a backoff schedule (the
    claim script) add no permission."""
    client = redis_version_server.client()
    create_users([client])
    seed(client, ["events:orders"], ["billing"])
    client.xgroup_createconsumer("events:orders", "billing", "app-1")  # live: just created
    args = job_args(redis_version_server.url, "recovery", tmp_path, "streams.match=events:*",
                    f"reprocess.mode={mode}", *schedule)
    assert RecoverJob(lambda s: spark).main(args) == 0, capsys.readouterr()
    done = {"requeue": '"requeued":', "reassign": '"reassigned":'}.get(mode, '"reprocessed":')
    totals = capsys.readouterr().out.rsplit("\n", 2)[-2]
    assert ('"backoff":null' in totals) is not schedule, totals
    assert f"{done}0," not in totals, totals  # something was moved
    assert refusals([client]) <= {setinfo_refusal(client)}


def test_documented_users_run_everything_on_a_cluster(spark, redis_cluster: LocalCluster,
                                                      tmp_path, capsys):
    redis_cluster.wait_healthy()
    redis_cluster.flush()
    nodes = [n.client() for n in redis_cluster.nodes]
    create_users(nodes)
    try:
        run_as_documented_users(spark, redis_cluster.url, redis_cluster.client(), nodes,
                                tmp_path, capsys)
    finally:
        for node in nodes:
            node.acl_deluser("recovery", "redrive")


@pytest.mark.parametrize(("taken_away", "message"), [
    (["-xautoclaim"], "may not run XAUTOCLAIM, which the job needs"),  # claim, on executors
    (["-xadd"], "may not run XADD, which the job needs"),  # inside the dead-letter script
    (["-xinfo|stream", "-xinfo|groups"], "may not run XINFO GROUPS, which the job needs"),
    (["resetkeys", "~events:*"], "access to the stream and dead-letter keys"),  # no DLQ keys
])
def test_one_missing_permission_is_named_in_one_line(taken_away, message, spark, redis_server,
                                                     tmp_path, capsys):
    client = redis_server.client()
    create_users([client], *taken_away)
    seed(client, STREAMS, ["billing"])
    code = RecoverJob(lambda s: spark).main(job_args(redis_server.url, "recovery", tmp_path,
                                                     "streams.match=events:*"))
    out, err = capsys.readouterr()
    assert code == 1
    errors = [line for line in err.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and message in errors[0], err[-3000:]
    assert "Traceback" not in err
    assert '"status": "error"' in out.splitlines()[-1] or '"status":"failed"' in out


def test_a_refused_slot_map_is_named_not_mistaken_for_a_plain_server(spark, redis_cluster,
                                                                      tmp_path, capsys):
    """redis-py reports a NOPERM on CLUSTER SLOTS as "Cluster mode is not enabled"."""
    redis_cluster.wait_healthy()
    nodes = [n.client() for n in redis_cluster.nodes]
    create_users(nodes, "-cluster|slots")
    try:
        code = RecoverJob(lambda s: spark).main(job_args(redis_cluster.url, "recovery",
                                                         tmp_path, "streams.match=events:*"))
    finally:
        for node in nodes:
            node.acl_deluser("recovery", "redrive")
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error")]
    assert code == 1
    assert errors == ["error: the Redis user 'recovery' may not run CLUSTER SLOTS, which the job "
                      "needs: grant it, e.g. ACL SETUSER recovery +cluster|slots (see README, "
                      "'ACL')"]


def test_retention_script_without_xtrim_counts_but_may_not_trim(redis_server, tmp_path):
    """The retention script (EVALSHA, line 5) calls XRANGE and XTRIM: a user without XTRIM
    alone still runs a dry run; a real run stops at the refused XTRIM with the job's
    permission error naming it, and no letter goes."""
    client = redis_server.client()
    create_users([client], dropping="+xtrim")
    dlq = "{events:orders}:dlq"
    for n in range(3):
        client.xadd(dlq, {b"n": str(n).encode(), b"x-original-stream": b"events:orders"})
    before = client.xrange(dlq)
    sets = [f"redis.url={redis_server.url}", "redis.username=recovery",
            f"redis.password={PASSWORD}", "streams.keys=events:orders",
            "dead_letters.max_length=1"]

    def retain(*extra: str) -> dict | None:
        settings = load_settings(None, [*sets, *extra])
        streams, _ = find_dead_letter_streams(settings, redis_params(settings))
        return apply_retention(redis_params(settings), streams, settings.dead_letters)

    dry = retain("dead_letters.dry_run=true")
    assert dry is not None and dry["would_trim"] == 2 and client.xrange(dlq) == before
    with pytest.raises(RedisPermissionError, match="may not run XTRIM"):
        retain()
    assert client.xrange(dlq) == before


@pytest.mark.parametrize("without", [None, "+xtrim"], ids=["line-10", "without-line-10"])
def test_dead_letter_retention_needs_line_10(spark, redis_server, tmp_path, capsys, without):
    """docs/ACL.md line 10: with it the recovery user trims (TIME, XREVRANGE, XTRIM); without
    it a run with retention on stops at the first refused command, in one line, exit 1, and
    no letter is trimmed."""
    client = redis_server.client()
    create_users([client], without=without)
    for n in range(3):  # letters (their metadata block): retention trims only those
        client.xadd("{events:orders}:dlq", {b"n": str(n).encode(),
                                            b"x-original-stream": b"events:orders"})
    before = client.xrange("{events:orders}:dlq")
    args = job_args(redis_server.url, "recovery", tmp_path, "streams.keys=events:orders",
                    "dead_letters.max_length=1")
    code = DeadLettersJob(lambda _: spark).main(args)
    out, err = capsys.readouterr()
    if without is None:
        assert code == 0, err[-3000:]
        assert client.xrange("{events:orders}:dlq") == before[-1:]
        assert json.loads(out.strip().splitlines()[-1])["retention"]["trimmed"] == 2
        assert refusals([client]) <= {setinfo_refusal(client)}
    else:
        errors = [line for line in err.splitlines() if line.startswith("error: ")]
        assert code == 1 and len(errors) == 1 and "may not run TIME" in errors[0], err[-3000:]
        assert client.xrange("{events:orders}:dlq") == before


def test_without_the_run_registration_line_a_given_run_id_is_warned_about(
        spark, redis_server, tmp_path, capsys):
    """docs/ACL.md, the line of ``~recovery:run:*``: without it a run still recovers; with a
    given ``--run-id`` a WARNING, also in the summary's ``warnings``, says the ID could not be
    registered (naming the ACL line), a generated ID's run says nothing. With it, the run
    registers (the ACL LOG shows no SET refused) and deletes its registration at the end."""
    client = redis_server.client()
    create_users([client], without="~recovery:run:*")
    seeded = seed(client, STREAMS, ["billing"])
    recover = job_args(redis_server.url, "recovery", tmp_path, "streams.match=events:*")
    assert RecoverJob(lambda s: spark).main([*recover, "--run-id", "given"]) == 0, \
        capsys.readouterr()
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    (warning,) = summary["warnings"]
    assert "run given: its ID cannot be registered" in warning and "~recovery:run:*" in warning
    assert_recovered(client, seeded)
    assert ("recovery", "key", "recovery:run:given") in refusals([client])
    assert RecoverJob(lambda s: spark).main(recover) == 0, capsys.readouterr()
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["warnings"] == []

    create_users([client])
    assert RecoverJob(lambda s: spark).main([*recover, "--run-id", "granted"]) == 0, \
        capsys.readouterr()
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["warnings"] == []
    assert refusals([client]) <= {setinfo_refusal(client)}
    assert client.keys("recovery:run:*") == []
