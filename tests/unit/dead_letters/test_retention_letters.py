"""Retention trims only letters of the selected sources (issue 60, 1 and 2;
recovery.dead_letters.retention, lua/trim_letters.lua): on a dead-letter name that lands on an
application stream, on a stream mixing letters and other entries, and on a dead-letter stream
shared by a selected and an unselected source, it stops at the first entry it may not take
(XTRIM MINID up to it, never past it) and says where and why; a dry run counts exactly what the
real run then trims. Redis itself (XRANGE, XPENDING) is checked after every run.

Entries are written with explicit IDs whose time part sets their age on the server's clock.
"""

from __future__ import annotations

import json
import logging

import pytest
import redis

from recovery.dead_letters.retention import cut_of, retention_warnings
from recovery.jobs.dead_letters import DeadLettersJob
from recovery.redis_io.trim import LetterScope, server_time_ms, trim_letters
from recovery.settings.model import load_settings
from tests.support.retention_tools import retain

LETTER, APP = "letter", "app"  # what write_aged writes: a letter (metadata block) or not


def write_aged(client: redis.Redis, key: str, entries: list[tuple[str, str, int]]
               ) -> list[str]:
    """XADD per (kind, source, age in s before the server's now), oldest first, IDs
    ``<ms>-<i>``: a LETTER carries dead_letter.lua's block for `source`; an APP entry is
    an application's order. Their IDs."""
    now, ids = server_time_ms(client), []
    for i, (kind, source, age_s) in enumerate(entries):
        fields: dict[bytes, bytes] = {b"order": str(i).encode(), b"amount": b"9.50"}
        if kind == LETTER:
            fields.update({b"x-original-stream": source.encode(), b"x-original-group": b"eu",
                           b"x-original-id": f"1-{i}".encode(),
                           b"x-death-reason": b"handler-rejected"})
        ids.append(client.xadd(key, fields, id=f"{now - age_s * 1000}-{i}").decode())
    return ids


def pel(client: redis.Redis, key: str, group: str) -> list[tuple[bytes, bytes, int]]:
    """The group's PEL rows without their idle time: (ID, consumer, deliveries)."""
    return [(r["message_id"], r["consumer"], r["times_delivered"])
            for r in client.xpending_range(key, group, "-", "+", 100)]


def only_row(report: dict, key: str) -> dict:
    [row] = [r for r in report["streams"] if r["dead_letter_stream"] == key]
    return row


@pytest.mark.parametrize("letters", [0, 5], ids=["app-entries-only", "letters-appended"])
def test_an_application_stream_named_as_dead_letter_stream_is_never_trimmed(
        server, tmp_path, caplog, letters):
    """Issue 60, 1: ``{stream}:{group}`` lands on the application stream ``shop:eu``; with
    retention on, its entries stay byte for byte and its group's PEL is intact."""
    client = server.client()
    client.xgroup_create("shop", "eu", id="$", mkstream=True)
    app = write_aged(client, "shop:eu", [(APP, "", 1000 - i) for i in range(5)])
    client.xgroup_create("shop:eu", "app", id="0")
    client.xreadgroup("app", "crashed-worker", {"shop:eu": ">"}, count=2)
    write_aged(client, "shop:eu", [(LETTER, "shop", 500 - i) for i in range(letters)])
    before, pending = client.xrange("shop:eu"), pel(client, "shop:eu", "app")

    with caplog.at_level(logging.WARNING, "recovery"):
        report = retain(server, tmp_path, "streams.keys=shop",
                        "dead_letter.stream={stream}:{group}", "dead_letters.max_age_s=120")

    assert client.xrange("shop:eu") == before
    assert pel(client, "shop:eu", "app") == pending and len(pending) == 2
    row = only_row(report, "shop:eu")
    assert (row["trimmed"], row["would_trim"], row["last_trimmed_id"]) == (0, 0, None)
    assert (row["stopped_at_id"], row["stopped_because"], row["kept_from_id"]) == (
        app[0], "not-a-letter", app[0])
    assert (report["trimmed"], report["stopped_streams"]) == (0, 1)
    assert any(r.levelno == logging.WARNING and "shop:eu" in r.message and app[0] in r.message
               for r in caplog.records)


MIXED = [(LETTER, "orders", 900), (LETTER, "orders", 890), (APP, "", 880),
         (LETTER, "orders", 870), (LETTER, "orders", 10)]
SHARED = [(LETTER, "s1", 900), (LETTER, "s1", 890), (LETTER, "s2", 880), (LETTER, "s1", 870),
          (LETTER, "s2", 860), (LETTER, "s2", 850)]
CASES = {  # key, entries, overrides, trimmed (the oldest n), why it stops, source it stops at
    "mixed": ("{orders}:dlq", MIXED, ["streams.keys=orders"], 2, "not-a-letter", None),
    "shared-one-selected": ("CDL", SHARED, ["streams.keys=s1", "dead_letter.stream=CDL"], 2,
                            "source-not-selected", "s2"),
    "shared-s2-first": ("CDL", [(LETTER, "s2", 900), *SHARED[1:]], ["streams.keys=s1",
                                                                   "dead_letter.stream=CDL"],
                        0, "source-not-selected", "s2"),
    "shared-both-selected": ("CDL", SHARED, ["streams.keys=s1,s2", "dead_letter.stream=CDL"],
                             6, None, None),
}


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("page", [1, 2, 1000])
def test_retention_stops_at_the_first_entry_it_may_not_take(server, tmp_path, case, page):
    """Issue 60, 1 and 2: oldest first, up to the first entry that is not a letter or is a
    letter of a source not selected, never past it; the dry run counts exactly that."""
    key, entries, overrides, n, why, source = CASES[case]
    client = server.client()
    ids = write_aged(client, key, entries)
    before = client.xrange(key)
    args = [*overrides, "dead_letters.max_age_s=60", f"dead_letters.page_size={page}"]

    dry = retain(server, tmp_path, *args, "dead_letters.dry_run=true")
    assert client.xrange(key) == before
    real = retain(server, tmp_path, *args)

    assert client.xrange(key) == before[n:]
    dry_row, row = only_row(dry, key), only_row(real, key)
    assert (row["trimmed"], row["would_trim"], dry_row["would_trim"], dry_row["trimmed"]) == (
        n, n, n, 0)
    assert row["last_trimmed_id"] == dry_row["last_trimmed_id"] == (ids[n - 1] if n else None)
    assert (row["stopped_because"], row["stopped_source"]) == (why, source)
    assert row["stopped_at_id"] == (ids[n] if why else None)
    if why:  # else the age cut, which moves on with the clock between the two runs
        assert row["kept_from_id"] == dry_row["kept_from_id"] == ids[n]
    assert (real["trimmed"], dry["would_trim"], real["stopped_streams"]) == (n, n, int(bool(why)))
    warnings = retention_warnings(real)
    assert len(warnings) == int(bool(why)) and all(ids[n] in w and key in w for w in warnings)
    assert all(f"a letter of {source}, a stream not selected" in w for w in warnings if source)


def test_a_letter_trimmed_while_young_entries_follow_the_stop(redis_server, tmp_path):
    """The length limit too stops at a non-letter: the stream keeps more than max_length."""
    client = redis_server.client()
    ids = write_aged(client, "{orders}:dlq", MIXED)
    before = client.xrange("{orders}:dlq")
    report = retain(redis_server, tmp_path, "streams.keys=orders", "dead_letters.max_length=1")
    assert client.xrange("{orders}:dlq") == before[2:]
    row = only_row(report, "{orders}:dlq")
    assert (row["trimmed"], row["by"], row["stopped_at_id"]) == (2, ["max_length"], ids[2])


def test_an_entry_added_below_the_cut_after_it_was_found_is_checked(redis_server, tmp_path):
    """The cut is found first, the trim later: an application entry XADDed meanwhile with an
    ID below the cut (the stream's top was older) is checked by the trim's own script and
    stays, with everything after it. A bare ``XTRIM MINID = <cut>`` takes it."""
    client = redis_server.client()
    ids = write_aged(client, "{orders}:dlq", MIXED[:2])
    settings = load_settings(None, [f"redis.url={redis_server.url}", "streams.keys=orders",
                                    "dead_letters.max_age_s=60"])
    cut = cut_of(client, "{orders}:dlq", settings.dead_letters, server_time_ms(client))
    assert cut is not None
    late = client.xadd("{orders}:dlq", {b"order": b"late"},
                       id=f"{int(cut.below.split('-')[0]) - 1000}-0").decode()
    before = client.xrange("{orders}:dlq")

    step = trim_letters(client, "{orders}:dlq", "(" + late, cut.below,
                        LetterScope(["orders"]), 1,
                        dry_run=False)  # a trim starts at the stream's start whatever it is given
    assert (step.passed, step.last, step.bound, step.why) == (1, ids[0], ids[1], "more")
    step = trim_letters(client, "{orders}:dlq", "-", cut.below, LetterScope(["orders"]), 10,
                        dry_run=False)

    assert (step.passed, step.last, step.bound, step.why) == (1, ids[1], late, "not-a-letter")
    assert client.xrange("{orders}:dlq") == before[2:] and before[2][0].decode() == late


@pytest.mark.slow
def test_the_job_leaves_an_application_stream_and_says_why(spark, redis_server, tmp_path,
                                                           capsys):
    """Issue 60, 1, through the job: ``without_metadata: 5`` and nothing trimmed."""
    client = redis_server.client()
    client.xgroup_create("shop", "eu", id="$", mkstream=True)
    app = write_aged(client, "shop:eu", [(APP, "", 1000 - i) for i in range(5)])
    client.xgroup_create("shop:eu", "app", id="0")
    client.xreadgroup("app", "crashed-worker", {"shop:eu": ">"}, count=2)
    write_aged(client, "shop:eu", [(LETTER, "shop", 500 - i) for i in range(5)])
    before = client.xrange("shop:eu")
    argv = ["--set", f"redis.url={redis_server.url}", "--set", f"report.path={tmp_path / 'r'}",
            "--set", "streams.keys=shop", "--set", "dead_letter.stream={stream}:{group}",
            "--set", "dead_letters.max_age_s=120"]

    assert DeadLettersJob(lambda _: spark).main(argv) == 0

    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert client.xrange("shop:eu") == before
    assert client.xpending("shop:eu", "app")["pending"] == 2
    assert summary["totals"]["without_metadata"] == 5
    [row] = summary["retention"]["streams"]
    assert (row["trimmed"], row["stopped_because"], row["stopped_at_id"]) == (
        0, "not-a-letter", app[0])
    [warning] = summary["warnings"]
    assert "shop:eu" in warning and app[0] in warning and "not a letter" in warning


@pytest.mark.slow
def test_a_cluster_stops_on_each_node_at_its_own_non_letter(redis_cluster, tmp_path):
    redis_cluster.wait_healthy()
    redis_cluster.flush()
    client = redis_cluster.client()
    streams = {"{orders}:dlq": "orders", "pay{eu}:dlq": "pay{eu}", "{audit}:dlq": "audit"}
    assert len({client.keyslot(k) for k in streams}) == 3
    before = {}
    for i, (dlq, source) in enumerate(streams.items()):
        # The application entry moves: 0, 1 and 2 letters before it go.
        write_aged(client, dlq, [(APP if j == i else LETTER, source, 900 - 100 * j)
                                 for j in range(4)])
        before[dlq] = client.xrange(dlq)
    report = retain(redis_cluster, tmp_path, "streams.keys=" + ",".join(streams.values()),
                    "dead_letters.max_age_s=60")
    assert report["trimmed"] == 3 and report["stopped_streams"] == 3
    for i, dlq in enumerate(streams):
        assert client.xrange(dlq) == before[dlq][i:]
