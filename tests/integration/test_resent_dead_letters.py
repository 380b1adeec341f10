"""The re-read of a dead-letter call sent again after a lost reply
(``recovery.executor.handover.resent``), on real servers without Spark: every 0 the second
sending answered is read again. Moved by this run -> its letter's ID; still pending -> 0;
acked by another consumer (no letter of this run, even with another run's letter of that
ID) -> uncertain. On a single server and on a Redis Cluster (each stream's slot on its own
node); the end-to-end runs with a lost reply are tests/integration/faults/
test_lost_dead_letter_reply.py."""

from __future__ import annotations

import time

import pytest

from recovery.executor.handover.resent import UNCERTAIN, recheck_resent
from recovery.params import RedisParams
from recovery.redis_io.dlq_names import dead_letter_key
from recovery.redis_io.redis_conn import connect
from recovery.redis_io.scripts import (
    MOVED_NOT_OURS,
    DeadLetter,
    DeadLetterContext,
    dead_letter_units,
)
from tests.support.backlogs import DEAD
from tests.support.cluster_fixtures import LocalCluster, keys_on_every_primary
from tests.support.fault_tools import GROUP
from tests.support.reprocess_tools import stuck
from tests.support.servers import FLAVORS, start_server

RUN = "resent1"


def move(client, stream: str, ids: list[str]) -> dict[str, str]:
    """Dead-letter `ids` of `stream` (owned by DEAD) as run RUN: {ID: letter ID}."""
    ctx = DeadLetterContext(stream, GROUP, DEAD, dead_letter_key(stream, ":dlq"), RUN, 5,
                            int(time.time() * 1000))
    reply = dead_letter_units(client, [(ctx, [DeadLetter(i, 9, 0, DEAD, "test") for i in ids])])
    return {i: r.decode() for i, r in zip(ids, reply[0], strict=True)}


def reread(client, stream: str, ids: list[str], sent_at: float) -> dict[str, object]:
    """recheck_resent of a 0 for each of `ids`: {ID: its new status}."""
    pairs = [((stream, i), MOVED_NOT_OURS) for i in ids]
    again = recheck_resent(client, pairs, sent_at,
                           lambda job: (job[0], GROUP, dead_letter_key(job[0], ":dlq"), job[1]),
                           RUN, delete_acked=False)
    return {job[1]: status for job, status in again}


@pytest.mark.parametrize("flavor", FLAVORS)
def test_each_zero_is_read_again_as_moved_pending_or_uncertain(flavor):
    with start_server(flavor) as server:
        plain = server.client()
        stream = "events:resent"
        ids = sorted(k[2] for k in stuck(plain, stream, {"poison": (4, 9)}))
        dlq = dead_letter_key(stream, ":dlq")
        client = connect(RedisParams(server.url))
        sent_at = time.monotonic()
        letters = move(client, stream, ids[:2])
        plain.xack(stream, GROUP, ids[2])  # another consumer's ack
        plain.xadd(dlq, {"x-original-stream": stream, "x-original-group": GROUP,
                         "x-original-id": ids[2], "x-death-reason": "r", "x-run-id": "other"})
        assert reread(client, stream, ids, sent_at) == {
            ids[0]: letters[ids[0]], ids[1]: letters[ids[1]], ids[2]: UNCERTAIN,
            ids[3]: MOVED_NOT_OURS}
        assert plain.xlen(dlq) == 3  # read only: nothing written


@pytest.mark.slow
def test_the_reread_reads_each_streams_own_node_on_a_cluster():
    cluster = LocalCluster(with_replica=False)
    cluster.start()
    try:
        plain = cluster.client()
        streams = keys_on_every_primary(plain, 1, prefix="events:r")
        client = connect(RedisParams(cluster.url))
        for stream in streams:
            ids = sorted(k[2] for k in stuck(plain, stream, {"poison": (2, 9)}))
            sent_at = time.monotonic()
            letters = move(client, stream, ids)
            assert reread(client, stream, ids, sent_at) == letters
    finally:
        cluster.stop()
