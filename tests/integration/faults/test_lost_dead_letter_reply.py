"""A dead-letter call whose reply is lost (ReplyDropper: the script ran, its reply thrown
away, the connection closed) is sent again by redis-py; the second sending finds the moved
entries no longer pending and answers 0. The report must still say what Redis shows: each
entry dead-lettered once, with its letter's ID (and, with XACKDEL, deleted). On every server
flavor, with the claim journal on and off; checked in Redis (XRANGE, XPENDING)."""

from __future__ import annotations

import pytest
from redis import Redis

from recovery.redis_io import scripts
from recovery.redis_io.dlq_names import dead_letter_key
from tests.support.fault_tools import GROUP, job_args, report_rows, run_in_process
from tests.support.invariants import pel
from tests.support.lost_reply import ReplyDropper
from tests.support.reprocess_tools import stuck
from tests.support.servers import FLAVORS, WITH_XACKDEL, start_server

pytestmark = pytest.mark.slow

STREAM = "events:lost"
JOURNAL_OFF = "claim.journal_prefix="
CASES = [  # (server flavor, extra settings): each flavor once, the journal off in most
    *[(flavor, [JOURNAL_OFF]) for flavor in FLAVORS],
    ("redis62", []),
    (WITH_XACKDEL, [JOURNAL_OFF, "reprocess.delete_acked=true"]),
]


def letters_by_original(client: Redis, dlq: str) -> dict[str, list[str]]:
    """x-original-id -> the IDs of the letters of `dlq` that carry it."""
    found: dict[str, list[str]] = {}
    for letter_id, fields in client.xrange(dlq):
        found.setdefault(fields[b"x-original-id"].decode(), []).append(letter_id.decode())
    return found


@pytest.mark.parametrize(("flavor", "settings"), CASES,
                         ids=[f"{f}-{'-'.join(s) or 'journal'}" for f, s in CASES])
def test_a_lost_dead_letter_reply_reports_each_move_once(flavor, settings, spark, tmp_path):
    with start_server(flavor) as server:
        client = server.client()
        seeded = stuck(client, STREAM, {"poison": (3, 9)})
        sha = client.script_load(scripts._source("dead_letter")).encode()
        proxy = ReplyDropper(server.port, sha)
        try:
            result = run_in_process(spark, job_args(proxy.url(), tmp_path, [STREAM], *settings,
                                                    run_id="lostdl"))
        finally:
            proxy.close()
        assert proxy.dropped == 1, "the fault did not happen"
        assert result.code == 0, result.stderr[-3000:]
        assert pel(client, STREAM, GROUP) == {}
        letters = letters_by_original(client, dead_letter_key(STREAM, ":dlq"))
        assert sorted(letters) == sorted(k[2] for k in seeded)
        assert all(len(ids) == 1 for ids in letters.values()), letters  # never two letters
        deleted = True if "reprocess.delete_acked=true" in settings else None
        assert client.xlen(STREAM) == (0 if deleted else len(seeded))
        rows = report_rows(spark, tmp_path, "lostdl") or []
        assert {r["id"]: (r["action"], r["dead_letter_id"], r["entry_deleted"]) for r in rows} \
            == {i: ("dead_lettered", ids[0], deleted) for i, ids in letters.items()}
