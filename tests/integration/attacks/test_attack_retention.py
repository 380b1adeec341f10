"""Attacks on the dead-letter job's retention (jobs/dead_letters.py with dead_letters.max_age_s /
max_length / retention_floor_s), each against real servers and checked in Redis itself
(XRANGE, XLEN), never only in the summary. Each test failed on the code it was written against.

Entries are written with explicit IDs whose time part sets their age on the server's clock.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import redis

from recovery.dead_letters.retention import apply_retention
from recovery.dead_letters.run import find_dead_letter_streams
from recovery.errors import RecoveryError
from recovery.jobs.dead_letters import DeadLettersJob
from recovery.redis_io.trim import server_time_ms
from recovery.settings.model import load_settings, redis_params
from tests.support.retention_tools import retain
from tests.support.servers import CLAIM_DROPS_DELETED, ON_NEWEST_TOO, ON_ONE_SERVER, has


def letters(client: redis.Redis, key: str, source: str, groups: list[str], age_s: int
            ) -> list[bytes]:
    """One letter per group (dead_letter.lua's block), `age_s` s old on the server's clock,
    appended to `key`; their IDs."""
    now, ids = server_time_ms(client), []
    for i, group in enumerate(groups):
        fields = {b"order": str(i).encode(), b"x-original-stream": source.encode(),
                  b"x-original-group": group.encode(), b"x-original-id": f"1-{i}".encode(),
                  b"x-death-reason": b"handler-rejected"}
        ids.append(client.xadd(key, fields, id=f"{now - age_s * 1000 + i}-0"))
    return ids


def job(spark, server_url: str, tmp_path: Path, capsys, *overrides: str) -> tuple[int, dict]:
    """jobs/dead_letters.py with `overrides`: its exit code and its JSON summary."""
    argv = ["--set", f"redis.url={server_url}", "--set", f"report.path={tmp_path / 'r'}"]
    for o in overrides:
        argv += ["--set", o]
    code = DeadLettersJob(lambda _: spark).main(argv)
    return code, json.loads(capsys.readouterr().out.strip().splitlines()[-1])


@pytest.mark.slow
@pytest.mark.parametrize("template", [None, "dlq:{stream}:{group}"],
                         ids=["one-stream-per-source", "one-stream-per-group"])
def test_retention_never_trims_letters_of_a_group_not_selected(spark, redis_server, tmp_path,
                                                              capsys, template):
    """``streams.groups = ["eu"]`` selects the group eu of orders; the letters of its other
    group us (another team's) are not the run's to delete. Before: the dead-letter job ignored
    streams.groups, exit 0, status ok, and trimmed every letter of us (with a name per group,
    all of ``dlq:orders:us``). Refusing the setting (exit 2) or honouring it both pass."""
    client = redis_server.client()
    client.xgroup_create("orders", "eu", id="$", mkstream=True)
    client.xgroup_create("orders", "us", id="$")
    keys = {g: ("{orders}:dlq" if template is None else f"dlq:orders:{g}") for g in ("eu", "us")}
    for age_s, group in ((900, "us"), (890, "eu"), (880, "us")):
        letters(client, keys[group], "orders", [group], age_s=age_s)
    us_before = [e for e in client.xrange(keys["us"]) if e[1][b"x-original-group"] == b"us"]
    assert len(us_before) == 2

    code, summary = job(spark, redis_server.url, tmp_path, capsys, "streams.keys=orders",
                        "streams.groups=eu", "dead_letters.max_age_s=60",
                        *([f"dead_letter.stream={template}"] if template else []))

    us_after = [e for e in client.xrange(keys["us"]) if e[1][b"x-original-group"] == b"us"]
    assert us_after == us_before, (code, summary["retention"])
    if code == 0:
        assert summary["retention"]["trimmed"] <= 1  # at most eu's own letter


# The retention script on every server: test_letters_a_group_still_holds_are_trimmed_and_its_...
@ON_ONE_SERVER
@pytest.mark.parametrize("overrides", [
    ["dead_letters.max_age_s=100000000000"],
    ["dead_letters.max_length=1", "dead_letters.retention_floor_s=100000000000"],
    ["dead_letters.max_age_s=100000000000", "dead_letters.dry_run=true"],
], ids=["age-beyond-epoch", "floor-beyond-epoch", "age-beyond-epoch-dry-run"])
def test_a_limit_reaching_back_before_the_epoch_trims_nothing_and_does_not_fail(
        server, tmp_path, overrides):
    """A limit longer than the server's clock reaches back (``max_age_s`` or
    ``retention_floor_s`` above now, in seconds: "keep for ever", or a server whose clock is
    near 1970) makes the cut ``0-0``, and every letter is younger than it. Before: the
    script sent ``XRANGE key - (0-0`` and the whole run failed, exit 1, with the server's
    "invalid end ID for the interval", also in a dry run."""
    client = server.client()
    letters(client, "{orders}:dlq", "orders", ["eu", "eu", "eu"], age_s=900)
    before = client.xrange("{orders}:dlq")

    report = retain(server, tmp_path, "streams.keys=orders", *overrides)

    assert client.xrange("{orders}:dlq") == before
    assert (report["trimmed"], report["would_trim"]) == (0, 0)


@pytest.mark.slow
def test_a_retention_that_fails_midway_still_reports_what_it_trimmed(spark, redis_server,
                                                                      tmp_path, capsys):
    """The ACL user may write ``{a}:dlq`` but only read ``{b}:dlq`` (a selector): retention
    trims the 3 letters of ``{a}:dlq``, then XTRIM on ``{b}:dlq`` is refused. The run fails
    (exit 1, rightly), but the summary an operator or an alert reads must still say that 3
    letters were deleted. Before: ``retention: null``, ``streams: []``: the deletion was only
    in an INFO log line."""
    client = redis_server.client()
    for source in ("a", "b"):
        letters(client, f"{{{source}}}:dlq", source, ["g", "g", "g"], age_s=900)
    client.execute_command("ACL", "SETUSER", "ro", "on", ">pw", "~{a}*", "%R~{b}*", "+@all")
    url = redis_server.url.replace("redis://", "redis://ro:pw@")

    code, summary = job(spark, url, tmp_path, capsys, "streams.keys=a,b",
                        "dead_letters.max_age_s=60")

    assert client.xlen("{a}:dlq") == 0 and client.xlen("{b}:dlq") == 3  # Redis itself
    assert code == 1 and summary["status"] == "failed"
    assert summary["retention"] is not None, summary
    assert summary["retention"]["trimmed"] == 3
    [row] = [r for r in summary["retention"]["streams"] if r["dead_letter_stream"] == "{a}:dlq"]
    assert row["trimmed"] == 3


@pytest.mark.slow  # 100 000 streams: about 7 s (before the fix 150 s)
def test_a_stream_shared_by_many_sources_is_found_in_linear_time(redis_server, tmp_path):
    """``dead_letter.stream = "CDL"`` shared by 100 000 per-user streams (``streams.match =
    "user:*"``): finding the dead-letter streams (the dead-letter job's first step, and the
    sources retention checks letters against) must take about as long as reading the keys.
    Before: each source was appended by copying the tuple of the ones before it (quadratic:
    150 s here for 100 000, hours for a million: a hang before any read or
    trim)."""
    client = redis_server.client()
    n = 100_000
    with client.pipeline(transaction=False) as pipe:
        for i in range(n):
            pipe.xadd(f"user:{i}", {"a": "1"})
        pipe.execute()
    letters(client, "CDL", "user:7", ["g"], age_s=900)
    settings = load_settings(None, [f"redis.url={redis_server.url}",
                                    f"report.path={tmp_path / 'r'}", "streams.match=user:*",
                                    "dead_letter.stream=CDL", "dead_letters.max_age_s=60"])
    started = time.monotonic()

    streams, _ = find_dead_letter_streams(settings, redis_params(settings))

    elapsed = time.monotonic() - started
    [cdl] = streams
    assert len(set(cdl.sources)) == n
    assert elapsed < 20, f"{elapsed:.1f} s to find one dead-letter stream of {n} sources"
    report = apply_retention(redis_params(settings), streams, settings.dead_letters)
    assert report is not None and report["trimmed"] == 1 and client.xlen("CDL") == 0


@pytest.mark.slow
def test_a_trim_step_whose_reply_is_lost_is_still_counted(redis_server, tmp_path):
    """A trim step that outlasts ``redis.socket_timeout_s`` (10 000 letters of ~3 KB in one
    step, ``page_size`` 10 000: about a second of Lua) still trims on the server; redis-py's
    retry then sends the step again, which finds nothing left below the cut. Before: Redis
    lost all 10 000 letters while the report said ``trimmed: 0``, ``last_trimmed_id: null``
    (the dry run had said 10 000). Failing the run (a typed error) or counting the letters
    both pass; a report of 0 does not."""
    client = redis_server.client()
    now = server_time_ms(client)
    fields = {f"f{j}": "v" * 100 for j in range(30)} | {"x-original-stream": "a"}
    with client.pipeline(transaction=False) as pipe:
        for i in range(10_000):
            pipe.xadd("{a}:dlq", fields, id=f"{now - 900_000 + i}-0")
        pipe.execute()
    limits = ["streams.keys=a", "dead_letters.max_age_s=60", "dead_letters.page_size=10000"]
    dry = retain(redis_server, tmp_path, *limits, "dead_letters.dry_run=true")
    assert dry["would_trim"] == 10_000 and client.xlen("{a}:dlq") == 10_000

    try:
        report = retain(redis_server, tmp_path, *limits, "redis.socket_timeout_s=0.1")
    except RecoveryError:
        return  # the run failed and says so (what it trimmed: the midway test above)
    gone = 10_000 - client.xlen("{a}:dlq")
    assert report["trimmed"] == gone, (report["trimmed"], gone)


@pytest.mark.slow
def test_retention_on_a_cluster_counts_ages_from_the_earliest_primary_clock(redis_cluster,
                                                                           tmp_path):
    """Each primary stamps its letters' IDs with its own clock, so a cut taken from one
    node's clock trims letters on a node whose clock is behind it younger than
    ``max_age_s`` / ``retention_floor_s``: ``server_time_ms`` promises the earliest clock of
    the nodes. Before: redis-py sends TIME to its default node only (one primary's clock),
    the ``min`` over a per-node reply never ran. Checked by each primary's TIME calls
    (INFO commandstats): a skewed clock cannot be faked under Redis here."""
    redis_cluster.wait_healthy()
    client = redis_cluster.client()
    primaries = [n.client() for n in redis_cluster.primaries]

    def time_calls() -> list[int]:
        return [int(p.info("commandstats").get("cmdstat_time", {}).get("calls", 0))
                for p in primaries]

    before = time_calls()
    server_time_ms(client)
    after = time_calls()
    assert all(a > b for a, b in zip(after, before, strict=True)), (before, after)


@ON_NEWEST_TOO
def test_letters_a_group_still_holds_are_trimmed_and_its_pel_keeps_their_ids(server, tmp_path):
    """A team reads ``{orders}:dlq`` through a group of its own and has not acked its two
    oldest letters. Retention (``max_length`` 1) trims them all the same, with today's rule
    (XTRIM MINID =, whose default on Redis 8.2+ is KEEPREF): the group's PEL keeps the two
    IDs, whose entries are gone (XRANGE), and the next XAUTOCLAIM of the group lists them as
    deleted (7.0+) or as nil entries (6.2), as for any entry deleted upstream."""
    client = server.client()
    ids = letters(client, "{orders}:dlq", "orders", ["eu", "eu", "eu"], age_s=900)
    client.xgroup_create("{orders}:dlq", "ops", id="0")
    client.xreadgroup("ops", "reader", {"{orders}:dlq": ">"}, count=2)

    report = retain(server, tmp_path, "streams.keys=orders", "dead_letters.max_length=1")

    assert report["trimmed"] == 2
    assert [e[0] for e in client.xrange("{orders}:dlq")] == ids[2:]
    held = [r["message_id"] for r in client.xpending_range("{orders}:dlq", "ops", "-", "+", 10)]
    assert held == ids[:2], "the group's PEL keeps the trimmed letters' IDs"
    reply = client.execute_command("XAUTOCLAIM", "{orders}:dlq", "ops", "other", 0, "0-0")
    if has(client, CLAIM_DROPS_DELETED):
        assert (reply[1], reply[2]) == ([], ids[:2]), reply
    else:
        assert [e for e in reply[1] if e and e[0]] == [], reply  # two nil entries
        assert len(reply[1]) == 2, reply
