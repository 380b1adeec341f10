"""reprocess.delete_acked (recovery.executor.handover.lease, the dead_letter and requeue
scripts, recovery.targets.keys.check_features) against real servers, checked in Redis: on
Redis 8.6 the job's ack is XACKDEL ... ACKED, so an entry leaves its stream once no other
consumer group still references it, and the entries another group holds stay and are
reported as kept; on servers without XACKDEL (Redis 7.0, Valkey 8.1) the setting is refused
before anything is touched."""

from __future__ import annotations

import pytest
from redis import Redis

from recovery.redis_io.dlq_names import dead_letter_key
from tests.support.backlogs import DEAD
from tests.support.fault_tools import (
    GROUP,
    job_args,
    report_rows,
    rows_by_key,
    run_in_process,
    write_control,
)
from tests.support.invariants import dead_letters, pel
from tests.support.reprocess_tools import copies, stuck
from tests.support.servers import WITH_XACKDEL, XACKDEL, has, start_server

pytestmark = pytest.mark.slow

STREAM = "work"
OTHER = "billing"  # another application's group on the same stream
DELETE = "reprocess.delete_acked=true"


def ids_of(seeded: dict[tuple[str, str, str], str], kind: str) -> list[str]:
    """The IDs of `kind` in the job's group, in stream order."""
    return sorted((k[2] for k, v in seeded.items() if v == kind and k[1] == GROUP),
                  key=lambda i: tuple(map(int, i.split("-"))))


def in_stream(client: Redis, stream: str) -> set[str]:
    return {entry_id.decode() for entry_id, _ in client.xrange(stream)}


def test_an_entry_is_deleted_only_once_both_groups_have_acked_it(spark, tmp_path):
    """Two groups read every entry; the other group acked half of them before the run. The
    job (its group only) re-processes and dead-letters all of its own: the entries both
    groups acked are gone from the stream, those the other group still holds stay (and stay
    pending there), and the report and the summary say which is which. Once the other group
    acks the rest with XACKDEL ... ACKED, the stream is empty."""
    with start_server(WITH_XACKDEL) as server:
        client = server.client()
        assert has(client, XACKDEL)
        seeded = stuck(client, STREAM, {"ok": (8, 1), "poison": (4, 9)}, groups=(GROUP, OTHER))
        ok, poison = ids_of(seeded, "ok"), ids_of(seeded, "poison")
        done_by_other = ok[:4] + poison[:2]
        assert client.xack(STREAM, OTHER, *done_by_other) == len(done_by_other)
        held_by_other = sorted(set(ok + poison) - set(done_by_other))
        write_control(server.url)

        result = run_in_process(spark, job_args(server.url, tmp_path, [STREAM],
                                                f"streams.groups={GROUP}", DELETE,
                                                run_id="del1"))
        assert result.code == 0, result.stderr

        assert in_stream(client, STREAM) == set(held_by_other), "deleted where both acked"
        assert pel(client, STREAM, GROUP) == {}, "the job's group acked everything"
        assert set(pel(client, STREAM, OTHER)) == set(held_by_other), "the other group's PEL"
        assert client.xinfo_groups(STREAM)[0]["pending"] + \
            client.xinfo_groups(STREAM)[1]["pending"] == len(held_by_other)
        letters = dead_letters(client, STREAM)
        assert {letter[b"x-original-id"].decode() for letter in letters} == set(poison)
        rows = rows_by_key(report_rows(spark, tmp_path, "del1") or [])
        deleted = {k[2]: (r[0]["action"], r[0]["entry_deleted"]) for k, r in rows.items()}
        assert deleted == {i: ("reprocessed" if i in ok else "dead_lettered",
                               i in done_by_other) for i in ok + poison}
        assert result.summary["acked_deletions"] == {
            "deleted": 6, "kept": 6,
            "units": [{"stream": STREAM, "group": GROUP, "deleted": 6, "kept": 6}]}

        codes = client.execute_command("XACKDEL", STREAM, OTHER, "ACKED", "IDS",
                                       len(held_by_other), *held_by_other)
        assert codes == [1] * len(held_by_other) and client.xlen(STREAM) == 0


def test_a_requeue_deletes_the_original_and_keeps_the_copy(spark, tmp_path):
    """One group: each requeued original is acked and deleted with it; its copy (a new entry,
    unread by the group) stays, as do the dead letters."""
    with start_server(WITH_XACKDEL) as server:
        client = server.client()
        seeded = stuck(client, STREAM, {"ok": (5, 1), "poison": (2, 9)})
        ok, poison = ids_of(seeded, "ok"), ids_of(seeded, "poison")
        last = client.xinfo_stream(STREAM)["last-generated-id"].decode()
        result = run_in_process(spark, job_args(server.url, tmp_path, [STREAM],
                                                "reprocess.mode=requeue", DELETE,
                                                run_id="del2"))
        assert result.code == 0, result.stderr
        made = copies(client, STREAM, last)
        assert len(made) == 5
        assert in_stream(client, STREAM) == {copy_id for copy_id, _ in made.values()}
        assert pel(client, STREAM, GROUP) == {}
        assert len(dead_letters(client, STREAM)) == 2
        rows = rows_by_key(report_rows(spark, tmp_path, "del2") or [])
        assert {k[2]: r[0]["entry_deleted"] for k, r in rows.items()} == \
            dict.fromkeys(ok + poison, True)
        assert result.summary["acked_deletions"]["deleted"] == 7


@pytest.mark.parametrize("flavor", ["redis", "valkey"])
def test_a_server_without_xackdel_refuses_the_setting_in_one_line(flavor, tmp_path):
    """Redis 7.0 and Valkey 8.1 have no XACKDEL: exit 2, one line naming the setting and the
    server, before Spark starts, and nothing in Redis changed (no claim, no key)."""
    with start_server(flavor) as server:
        client = server.client()
        assert not has(client, XACKDEL)
        seeded = stuck(client, STREAM, {"ok": (3, 1), "poison": (1, 9)})
        before = (sorted(client.keys()), client.xrange(STREAM), pel(client, STREAM, GROUP))
        result = run_in_process(None, job_args(server.url, tmp_path, [STREAM], DELETE))
        lines = result.error_lines()
        assert result.code == 2 and len(lines) == 1, result.stderr
        assert result.summary["exit_code"] == 2
        assert lines[0].startswith("error: reprocess.delete_acked = true needs XACKDEL"), lines
        assert "unset reprocess.delete_acked" in lines[0]
        name = "Valkey" if flavor == "valkey" else "Redis"
        assert f"which {name} " in lines[0], lines
        after = (sorted(client.keys()), client.xrange(STREAM), pel(client, STREAM, GROUP))
        assert after == before and len(seeded) == 4
        assert {p.consumer for p in pel(client, STREAM, GROUP).values()} == {DEAD}
        assert not client.exists(dead_letter_key(STREAM, ":dlq"))
