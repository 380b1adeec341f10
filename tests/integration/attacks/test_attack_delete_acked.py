"""Attacks on reprocess.delete_acked (XACKDEL ... ACKED in the hand-over, dead-letter and
requeue paths) and on the ServerFeatures probe, through the job's command line against a
real Redis 8.6, checked in Redis itself (XRANGE, XLEN, XPENDING, XINFO GROUPS)."""

from __future__ import annotations

import pytest
from redis import Redis

from recovery.redis_io import scripts
from recovery.redis_io.dlq_names import dead_letter_key
from recovery.redis_io.features import XACKDEL_PROBE_KEY
from recovery.testing.local_redis import LocalServer
from tests.support.acl_rules import PASSWORD, create_users
from tests.support.cluster_fixtures import LocalCluster, keys_on_every_primary
from tests.support.fault_tools import (
    GROUP,
    JobResult,
    job_args,
    planned,
    report_rows,
    run_in_process,
    write_control,
)
from tests.support.invariants import pel
from tests.support.lost_reply import ReplyDropper
from tests.support.reprocess_tools import stuck
from tests.support.servers import WITH_XACKDEL, start_server

pytestmark = pytest.mark.slow

STREAM = "events:work"  # inside the documented users' key patterns (docs/ACL.md)
DELETE = "reprocess.delete_acked=true"


def snapshot(client: Redis, stream: str) -> tuple[object, ...]:
    """What a refused run must leave as it was: keys, the stream, the group's PEL."""
    return (sorted(client.keys()), client.xrange(stream), pel(client, stream, GROUP))


@pytest.mark.parametrize("mode", ["handler", "requeue"])
def test_a_user_without_xackdel_is_refused_before_anything_is_written(mode, spark, tmp_path):
    """The documented rules leave out +xackdel (docs/ACL.md). A run with delete_acked as that
    user used to fail inside the dead-letter and requeue scripts after their XADD (a script
    is not rolled back): letters and copies written, originals still pending, so every rerun
    wrote them again. It must be refused at start: one line naming +xackdel, exit 1, nothing
    in Redis changed."""
    with start_server(WITH_XACKDEL) as server:
        client = server.client()
        stuck(client, STREAM, {"ok": (4, 1), "poison": (2, 9)})
        create_users(client)
        before = snapshot(client, STREAM)
        result = run_in_process(spark, job_args(
            server.url, tmp_path, [STREAM], DELETE, f"reprocess.mode={mode}",
            "redis.username=recovery", f"redis.password={PASSWORD}"))
        lines = result.error_lines()
        assert result.code == 1 and len(lines) == 1, result.stderr[-3000:]
        assert "+xackdel" in lines[0], lines
        assert not client.exists(dead_letter_key(STREAM, ":dlq")), "a letter was written"
        assert snapshot(client, STREAM) == before


@pytest.mark.parametrize("flavor", ["redis62", "valkey"])
def test_an_older_server_with_command_renamed_refuses_the_setting_in_one_line(flavor,
                                                                             tmp_path):
    """Redis 6.2 quotes the unknown command with backticks (``unknown command `command```),
    Valkey with quotes: either way the setting is refused with exit 2, not exit 1 on an
    error."""
    with start_server(flavor, "--rename-command", "COMMAND", "") as server:
        client = server.client()
        stuck(client, STREAM, {"ok": (2, 1)})
        before = snapshot(client, STREAM)
        refused = run_in_process(None, job_args(server.url, tmp_path, [STREAM], DELETE))
        lines = refused.error_lines()
        assert refused.code == 2 and len(lines) == 1, refused.stderr[-3000:]
        assert "reprocess.delete_acked" in lines[0], lines
        assert snapshot(client, STREAM) == before


def test_a_server_with_command_renamed_runs_and_refuses_only_the_setting(spark, tmp_path):
    """``rename-command COMMAND ""`` (as a proxy that does not pass COMMAND on) answers
    ``ERR unknown command``, no ACL refusal. The probe used to raise it: every run on such a
    server stopped with exit 1, with or without the setting. The job must run as it did
    before the probe, and refuse only reprocess.delete_acked (it cannot ask for XACKDEL)."""
    with start_server(WITH_XACKDEL, "--rename-command", "COMMAND", "") as server:
        client = server.client()
        stuck(client, STREAM, {"ok": (4, 1), "poison": (2, 9)})
        before = snapshot(client, STREAM)
        refused = run_in_process(None, job_args(server.url, tmp_path, [STREAM], DELETE))
        lines = refused.error_lines()
        assert refused.code == 2 and len(lines) == 1, refused.stderr[-3000:]
        assert "reprocess.delete_acked" in lines[0] and "COMMAND" in lines[0], lines
        assert snapshot(client, STREAM) == before

        write_control(server.url)
        result = run_in_process(spark, job_args(server.url, tmp_path, [STREAM],
                                                "reprocess.mode=requeue"))
        assert result.code == 0, result.stderr[-3000:]
        assert pel(client, STREAM, GROUP) == {}
        assert client.xlen(dead_letter_key(STREAM, ":dlq")) == 2


def run_losing_a_reply(spark, server: LocalServer, tmp_path, marker: bytes, run_id: str
                       ) -> JobResult:
    """A run with the ack's deletion on, through a proxy that loses the reply to the first
    request holding `marker` (``ReplyDropper``): the fault happened, the run exited 0, the
    stream and its PEL are empty."""
    client = server.client()
    proxy = ReplyDropper(server.port, marker)
    try:
        result = run_in_process(spark, job_args(proxy.url(), tmp_path, [STREAM], DELETE,
                                                run_id=run_id))
    finally:
        proxy.close()
    assert proxy.dropped == 1, "the fault did not happen"
    assert result.code == 0, result.stderr[-3000:]
    assert client.xlen(STREAM) == 0 and pel(client, STREAM, GROUP) == {}
    return result


def test_a_lost_xackdel_reply_sent_again_still_reports_the_deletions(spark, tmp_path):
    """The hand-over's XACKDEL runs, its reply is lost, redis-py sends it again (the job's
    retry policy) and the second call answers -1 for every ID: not pending any more. The
    entries are gone from the stream; the report and ``acked_deletions`` must still say the
    job's ack deleted them (not that another consumer acked them and nothing was deleted)."""
    with start_server(WITH_XACKDEL) as server:
        client = server.client()
        seeded = stuck(client, STREAM, {"ok": (6, 1)})
        write_control(server.url)
        result = run_losing_a_reply(spark, server, tmp_path,
                                    b"XACKDEL\r\n$11\r\nevents:work", "lost1")
        rows = report_rows(spark, tmp_path, "lost1") or []
        assert len(rows) == len(seeded)
        assert {r["entry_deleted"] for r in rows} == {True}, rows
        assert result.summary["acked_deletions"]["deleted"] == len(seeded)


def test_a_cluster_in_a_rolling_upgrade_refuses_the_setting(spark, tmp_path):
    """A cluster whose first primary (redis-py's default node) runs Redis 8.6 and the other
    two Redis 7.0. The probe used to ask the default node only: XACKDEL counted as present,
    and the dead-letter script on the 7.0 primaries wrote each letter, then failed on
    XACKDEL (no rollback), once per task attempt, the original left pending. Every primary
    must be asked: refused, exit 2, nothing written on any node."""
    cluster = LocalCluster(with_replica=False, flavors=(WITH_XACKDEL, "redis", "redis"))
    cluster.start()
    try:
        client = cluster.client()
        streams = keys_on_every_primary(client, 1, prefix="events:w")
        for stream in streams:
            stuck(client, stream, {"ok": (2, 1), "poison": (2, 9)})
        before = {s: (client.xrange(s), pel(client, s, GROUP)) for s in streams}
        write_control(cluster.url)
        result = run_in_process(spark, job_args(cluster.url, tmp_path, streams, DELETE))
        lines = result.error_lines()
        assert result.code == 2 and len(lines) == 1, result.stderr[-3000:]
        assert "needs XACKDEL" in lines[0] and "Redis 7.0" in lines[0], lines
        assert not any(client.exists(dead_letter_key(s, ":dlq")) for s in streams)
        assert {s: (client.xrange(s), pel(client, s, GROUP)) for s in streams} == before
    finally:
        cluster.stop()


def test_a_plan_made_without_the_setting_is_not_applied_with_it(spark, tmp_path):
    """A dry run reviewed without reprocess.delete_acked, applied with it: the apply used to
    run and delete every entry it acked (the manifest did not hold the setting, so the plan
    could not say what it would do to the stream). Refused like another reprocess.mode:
    one line, exit 2, nothing in Redis changed."""
    with start_server(WITH_XACKDEL) as server:
        client = server.client()
        stuck(client, STREAM, {"ok": (4, 1), "poison": (2, 9)})
        write_control(server.url)
        plan = planned(spark, server.url, tmp_path, [STREAM])
        before = snapshot(client, STREAM)
        result = run_in_process(spark, [*job_args(server.url, tmp_path, [STREAM], DELETE),
                                         *plan])
        lines = result.error_lines()
        assert result.code == 2 and len(lines) == 1, result.stderr[-3000:]
        assert "reprocess.delete_acked" in lines[0], lines
        assert snapshot(client, STREAM) == before


def test_entries_a_group_has_not_read_stay_whatever_its_entries_read(spark, tmp_path):
    """Held: a group created after the entries at the third one's ID (``entries-read``
    unknown, ``lag`` null) has not read the later ones, and a group created at ``$`` never
    will read any. XACKDEL ... ACKED deletes the first three only, keeps the rest for the
    first group to read, and the report says which."""
    with start_server(WITH_XACKDEL) as server:
        client = server.client()
        seeded = stuck(client, STREAM, {"ok": (6, 1)})
        ids = sorted((k[2] for k in seeded), key=lambda i: tuple(map(int, i.split("-"))))
        client.xgroup_create(STREAM, "mid", id=ids[2])
        client.xgroup_create(STREAM, "late", id="$")
        mid = next(g for g in client.xinfo_groups(STREAM) if g["name"] == b"mid")
        assert mid["entries-read"] is None and mid["lag"] is None
        write_control(server.url)
        result = run_in_process(spark, job_args(server.url, tmp_path, [STREAM], DELETE,
                                                f"streams.groups={GROUP}", run_id="unread"))
        assert result.code == 0, result.stderr[-3000:]
        assert [i.decode() for i, _ in client.xrange(STREAM)] == ids[3:]
        assert pel(client, STREAM, GROUP) == {}
        rows = report_rows(spark, tmp_path, "unread") or []
        assert {r["id"]: r["entry_deleted"] for r in rows} == {
            i: i in ids[:3] for i in ids}
        assert result.summary["acked_deletions"]["deleted"] == 3
        assert len(client.xreadgroup("mid", "c", {STREAM: ">"})[0][1]) == 3


def test_a_lost_dead_letter_reply_sent_again_still_reports_the_move(spark, tmp_path):
    """The dead-letter script moves both poison entries (letters written, originals acked
    and deleted with XACKDEL), its reply is lost, redis-py sends the call again: the second
    call finds them no longer pending and answers 0. The report must still say they were
    dead-lettered and deleted, as Redis shows."""
    with start_server(WITH_XACKDEL) as server:
        client = server.client()
        stuck(client, STREAM, {"poison": (2, 9)})
        sha = client.script_load(scripts._source("dead_letter")).encode()
        result = run_losing_a_reply(spark, server, tmp_path, sha, "lostdl")
        assert client.xlen(dead_letter_key(STREAM, ":dlq")) == 2
        rows = report_rows(spark, tmp_path, "lostdl") or []
        assert {(r["action"], r["entry_deleted"]) for r in rows} == {("dead_lettered", True)}
        assert result.summary["acked_deletions"]["deleted"] == 2


def test_a_stream_deleted_during_the_handler_call_is_not_counted_as_deleted_by_the_ack(
        spark, tmp_path):
    """The stream is deleted while the handler works (its first call runs DEL). XACKDEL on a
    missing key answers -1 for every ID, no NOGROUP: the rows must still say the stream
    vanished before the ack (skipped), not that the job's ack deleted the entries."""
    with start_server(WITH_XACKDEL) as server:
        client = server.client()
        seeded = stuck(client, STREAM, {"ok": (4, 1)})
        write_control(server.url, on_first_call=[["DEL", STREAM]])
        result = run_in_process(spark, job_args(server.url, tmp_path, [STREAM], DELETE,
                                                run_id="vanish"))
        assert result.code == 0, result.stderr[-3000:]
        assert not client.exists(STREAM)
        rows = report_rows(spark, tmp_path, "vanish") or []
        assert len(rows) == len(seeded)
        assert {(r["action"], r["entry_deleted"]) for r in rows} == {("skipped", None)}, rows
        assert result.summary["acked_deletions"]["deleted"] == 0


def test_a_cluster_node_whose_user_may_not_run_xackdel_refuses_the_run(spark, tmp_path):
    """A Redis 8.6 cluster: ACL rules are per node, and only the node of the probe's key
    grants +xackdel. Every primary must be asked: refused with one line, exit 1, nothing
    written on any node (the other nodes' scripts would write letters, then fail)."""
    cluster = LocalCluster(with_replica=False, flavors=(WITH_XACKDEL,) * 3)
    cluster.start()
    try:
        client = cluster.client()
        streams = keys_on_every_primary(client, 1, prefix="events:w")
        for stream in streams:
            stuck(client, stream, {"ok": (2, 1), "poison": (2, 9)})
        probed = client.get_node_from_key(XACKDEL_PROBE_KEY).port
        for node in cluster.primaries:
            create_users(node.client())
            if node.port == probed:
                node.client().execute_command("ACL", "SETUSER", "recovery", "+xackdel")
        before = {s: (client.xrange(s), pel(client, s, GROUP)) for s in streams}
        write_control(cluster.url)
        result = run_in_process(spark, job_args(
            cluster.url, tmp_path, streams, DELETE, "redis.username=recovery",
            f"redis.password={PASSWORD}"))
        lines = result.error_lines()
        assert result.code == 1 and len(lines) == 1, result.stderr[-3000:]
        assert "+xackdel" in lines[0], lines
        assert not any(client.exists(dead_letter_key(s, ":dlq")) for s in streams)
        assert {s: (client.xrange(s), pel(client, s, GROUP)) for s in streams} == before
    finally:
        cluster.stop()
