"""Redrive (dead-letter stream -> source) against real Redis 7.0, Valkey 8.1 and Redis 6.2.

Every test checks Redis itself afterwards: which dead-letter IDs left, and what the new source
entries hold, byte for byte, compared with the original entries they came from. The filters
are the ``[redrive]`` settings (recovery.settings.redrive), the moves the redrive's script
calls (recovery.redis_io.redrive), and the exit codes come with the JSON summary line
(recovery.report.json_line).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import redis

from recovery.driver.job import run
from recovery.params import RedisParams
from recovery.redis_io.dlq_names import dead_letter_key
from recovery.redis_io.redis_conn import connect
from recovery.redis_io.streams import Fields, pairs
from recovery.redrive.run import RedriveSummary, run_redrive
from recovery.rows import Skipped
from recovery.settings.model import load_settings
from recovery.testing.backlog import add_entries, deliver
from recovery.testing.local_redis import LocalServer
from tests.support.backlogs import seed
from tests.support.cluster_fixtures import keys_on_every_primary
from tests.support.handlers import CHECKSUM, checksum
from tests.support.redrive_tools import dead_letter, dead_letter_pending, redrive

ROOT = Path(__file__).resolve().parents[3]
COUNTER = b"x-redrive-count"
R_LIMIT, R_FAILED = "max-deliveries-exceeded", "handler-failed-at-limit"
DLQ = "{orders}:dlq"  # shared by the sources "orders" and "{orders}"


def raw_client(server: LocalServer) -> redis.Redis:
    """A client whose XRANGE replies are raw: field order and duplicates kept."""
    return connect(RedisParams(server.url))


def entries(raw: redis.Redis, key: str, start: str = "-") -> list[tuple[str, Fields]]:
    return [(i.decode(), pairs(flat)) for i, flat in raw.execute_command("XRANGE", key, start, "+")]


def meta(fields: Fields) -> dict[bytes, bytes]:
    return dict(fields)  # metadata come last, so the block's values win


def new_group(client: redis.Redis, stream: str, group: str) -> None:
    client.xgroup_create(stream, group, id="$", mkstream=True)


def redriven_fields(original: Fields, count: int = 1) -> Fields:
    """What a redriven entry must hold: the original fields and the counter."""
    return [*original, (COUNTER, str(count).encode())]


# --- The full path: the recovery job dead-letters, the redrive brings entries back ----------

@pytest.mark.slow
def test_recover_then_redrive_restores_every_byte(spark, client, server, make_settings):
    seed(client, ["orders"], ["billing"])
    settings = make_settings("streams.keys=orders", "claim.count=50", "claim.max_deliveries=5",
                             "handler.path=tests.support.handlers:verify_or_fail")
    run(spark, settings)
    raw = raw_client(server)
    source = dict(entries(raw, "orders"))
    last_before = max(source, key=lambda i: tuple(map(int, i.split("-"))))
    letters = entries(raw, DLQ)
    assert len(letters) == 18

    summary = run_redrive(settings, RedriveSummary("r"))

    assert summary.totals == {"examined": 18, "matched": 18, "redriven": 18}
    assert entries(raw, DLQ) == []
    back = entries(raw, "orders", "(" + last_before)
    expected = [redriven_fields(source[meta(f)[b"x-original-id"].decode()]) for _, f in letters]
    assert [f for _, f in back] == expected  # order, duplicates and every byte
    assert all(dict(f)[CHECKSUM] == checksum(f[:-1]) for _, f in back)
    # Appended, not pending: the group reads them as new entries, in dead-letter order.
    read = client.xreadgroup("billing", "after-fix", {"orders": ">"})
    assert [i.decode() for i, _ in read[0][1]] == [i for i, _ in back]


# --- Metadata stripping and the redrive counter ---------------------------------------------

def test_strips_only_the_metadata_block_and_counts_redrives(client, server):
    new_group(client, "orders", "billing")
    payloads = [
        {b"x-original-stream": b"payload", b"x-exception-message": b"payload",
         b"\xff\x00": bytes(range(256)), b"": b""},
        {b"a": b"1", COUNTER: b"4", b"z": b"\xfe"},
    ]
    ids = dead_letter(client, "orders", "billing", payloads, [R_LIMIT, R_LIMIT])
    raw = raw_client(server)
    originals = [f for i, f in entries(raw, "orders") if i in ids]

    assert redrive(server, "streams.keys=orders").totals["redriven"] == 2
    first = entries(raw, "orders", "(" + ids[-1])
    assert [f for _, f in first] == [redriven_fields(originals[0]),
                                     [(b"a", b"1"), (COUNTER, b"5"), (b"z", b"\xfe")]]

    # The group reads them, fails again, dead-letters again; the next redrive counts on.
    first_ids = deliver(client, "orders", "billing", "c", 10)
    assert first_ids == [i for i, _ in first]
    dead_letter_pending(client, "orders", "billing", first_ids, [R_FAILED, R_FAILED])
    redrive(server, "streams.keys=orders")
    second = entries(raw, "orders", "(" + first_ids[-1])
    assert [f for _, f in second] == [redriven_fields(originals[0], 2),
                                      [(b"a", b"1"), (COUNTER, b"6"), (b"z", b"\xfe")]]
    assert entries(raw, DLQ) == []


# --- Filters ------------------------------------------------------------------------------

@dataclass
class FilterWorld:
    """A dead-letter stream shared by two sources, two groups, two reasons, two time phases."""

    letters: list[tuple[str, Fields]]  # the DLQ before the redrive
    sources: dict[str, dict[str, Fields]]  # source -> id -> original fields
    phase_b: str  # first dead-letter ID of the second phase

    def ms(self, dlq_id: str) -> int:
        return int(dlq_id.split("-")[0])


def build_filter_world(client: redis.Redis, server: LocalServer) -> FilterWorld:
    for stream, group in [("orders", "billing"), ("orders", "audit"), ("{orders}", "billing")]:
        new_group(client, stream, group)

    def payloads(tag: str, n: int) -> list[dict[bytes, bytes]]:
        return [{b"tag": tag.encode(), b"n": str(i).encode()} for i in range(n)]

    dead_letter(client, "orders", "billing", payloads("a-billing", 6), [R_LIMIT, R_FAILED] * 3)
    deliver(client, "orders", "audit", "c", 1000)  # audit read the billing batch too
    audit_ids = add_entries(client, "orders", 3, lambda i: payloads("a-audit", 3)[i])  # type: ignore[arg-type, return-value]
    deliver(client, "orders", "billing", "c", 1000)
    assert deliver(client, "orders", "audit", "c", 3) == audit_ids
    dead_letter_pending(client, "orders", "audit", audit_ids, [R_LIMIT] * 3)
    dead_letter(client, "{orders}", "billing", payloads("a-other", 3), [R_LIMIT] * 3)
    time.sleep(0.01)  # the second phase starts in a later millisecond
    dead_letter(client, "orders", "billing", payloads("b-billing", 4), [R_FAILED] * 4)
    raw = raw_client(server)
    letters = entries(raw, DLQ)
    phase_b = next(i for i, f in letters if dict(f)[b"tag"] == b"b-billing")
    sources = {s: dict(entries(raw, s)) for s in ("orders", "{orders}")}
    return FilterWorld(letters, sources, phase_b)


def _key(dlq_id: str) -> tuple[int, int]:
    ms, seq = dlq_id.split("-")
    return int(ms), int(seq)


def iso(ms: int) -> str:
    return (datetime(1970, 1, 1, tzinfo=UTC) + timedelta(milliseconds=ms)).isoformat()


Predicate = Callable[[FilterWorld, str, dict[bytes, bytes]], bool]
FILTER_CASES: dict[str, tuple[Callable[[FilterWorld], list[str]], Predicate]] = {
    "everything": (lambda w: [], lambda w, i, m: True),
    "group": (lambda w: ["redrive.groups=audit"],
              lambda w, i, m: m[b"x-original-group"] == b"audit"),
    "reason": (lambda w: [f"redrive.reasons={R_FAILED}"],
               lambda w, i, m: m[b"x-death-reason"] == R_FAILED.encode()),
    "group and reasons": (lambda w: ["redrive.groups=billing", f"redrive.reasons={R_LIMIT}"],
                          lambda w, i, m: m[b"x-original-group"] == b"billing"
                          and m[b"x-death-reason"] == R_LIMIT.encode()),
    "from id": (lambda w: [f"redrive.from_id={w.phase_b}"],
                lambda w, i, m: _key(i) >= _key(w.phase_b)),
    "to id": (lambda w: [f"redrive.to_id={w.phase_b}"], lambda w, i, m: _key(i) <= _key(w.phase_b)),
    "since": (lambda w: [f"redrive.since={iso(w.ms(w.phase_b))}"],
              lambda w, i, m: w.ms(i) >= w.ms(w.phase_b)),
    "until (epoch ms)": (lambda w: [f"redrive.until={w.ms(w.phase_b) - 1}"],
                         lambda w, i, m: w.ms(i) < w.ms(w.phase_b)),
}


@pytest.mark.parametrize("case", sorted(FILTER_CASES))
def test_filters_move_exactly_the_selected_entries(client, server, case):
    world = build_filter_world(client, server)
    overrides, wanted = FILTER_CASES[case]
    raw = raw_client(server)
    tails = {s: max(ids, key=_key) for s, ids in world.sources.items()}

    summary = redrive(server, "streams.keys=orders", *overrides(world))

    expected = [(i, f) for i, f in world.letters if meta(f)[b"x-original-stream"] == b"orders"
                and wanted(world, i, meta(f))]
    assert 0 < len(expected) < len(world.letters)
    assert summary.totals["redriven"] == len(expected)
    assert entries(raw, DLQ) == [e for e in world.letters if e not in expected]
    back = [f for _, f in entries(raw, "orders", "(" + tails["orders"])]
    source = world.sources["orders"]
    assert back == [redriven_fields(source[meta(f)[b"x-original-id"].decode()])
                    for _, f in expected]
    assert entries(raw, "{orders}", "(" + tails["{orders}"]) == []


def test_limit_and_the_other_source_of_a_shared_dead_letter_stream(client, server):
    world = build_filter_world(client, server)
    raw = raw_client(server)
    tail = max(world.sources["{orders}"], key=_key)

    summary = redrive(server, "streams.keys={orders}", "redrive.limit=2", "redrive.batch_size=1")

    other = [(i, f) for i, f in world.letters if meta(f)[b"x-original-stream"] == b"{orders}"]
    assert summary.totals["redriven"] == 2
    assert entries(raw, DLQ) == [e for e in world.letters if e not in other[:2]]
    back = [f for _, f in entries(raw, "{orders}", "(" + tail)]
    assert [dict(f)[b"tag"] for f in back] == [b"a-other", b"a-other"]
    assert [dict(f)[b"n"] for f in back] == [b"0", b"1"]


def test_match_selects_each_source_with_a_dead_letter_stream_once(client, server):
    new_group(client, "orders", "billing")
    dead_letter(client, "orders", "billing", [{b"n": b"1"}, {b"n": b"2"}], [R_LIMIT] * 2)
    client.xadd("payments", {"n": "3"})  # a stream without a dead-letter stream

    summary = redrive(server, "streams.match=*", "streams.keys=orders")

    assert [(u["stream"], u["redriven"]) for u in summary.units] == [("orders", 2)]
    assert (summary.status, summary.skipped) == ("ok", [])


def test_redrive_on_a_redis_cluster(redis_cluster):
    """Each dead-letter stream shares its source's hash slot, so every script call runs on
    the one primary that owns both; sources sit on all three primaries."""
    redis_cluster.wait_healthy()
    redis_cluster.flush()
    rc = redis_cluster.client()
    sources = [*keys_on_every_primary(rc, 1, prefix="rd"), "orders{eu}"]
    for stream in sources:
        new_group(rc, stream, "billing")
        dead_letter(rc, stream, "billing", [{b"n": b"1", b"\xff": b""}, {b"n": b"2"}],
                    [R_LIMIT, R_FAILED])

    summary = run_redrive(load_settings(None, [f"redis.url={redis_cluster.url}",
                                               "streams.match=*"]), RedriveSummary("c"))

    assert sorted(u["stream"] for u in summary.units) == sorted(sources)
    assert summary.totals["redriven"] == 2 * len(sources)
    for stream in sources:
        assert rc.xlen(dead_letter_key(stream, ":dlq")) == 0
        back = [f for _, f in rc.xrange(stream)][2:]
        assert back == [{b"n": b"1", b"\xff": b"", COUNTER: b"1"}, {b"n": b"2", COUNTER: b"1"}]
    rc.close()


# --- Dry run --------------------------------------------------------------------------------

def dump_all(client: redis.Redis) -> dict[bytes, bytes]:
    """DUMP of every key: entries, groups, PEL owners, counts and delivery times."""
    return {k: client.dump(k) for k in client.scan_iter(count=1000)}


def test_dry_run_counts_and_changes_nothing(client, server):
    world = build_filter_world(client, server)
    before = dump_all(client)

    dry = redrive(server, "streams.keys=orders", "redrive.dry_run=true",
                  f"redrive.reasons={R_FAILED}", "redrive.batch_size=1")

    assert dump_all(client) == before
    assert dry.dry_run and dry.totals["redriven"] == 0
    expected = sum(1 for _, f in world.letters if meta(f)[b"x-original-stream"] == b"orders"
                   and meta(f)[b"x-death-reason"] == R_FAILED.encode())
    assert dry.totals["matched"] == expected
    real = redrive(server, "streams.keys=orders", f"redrive.reasons={R_FAILED}")
    assert real.totals["redriven"] == expected


# --- Errors and exit codes ------------------------------------------------------------------

def test_source_of_another_type_is_skipped_and_left_alone(client, server):
    client.hset("orders", "not", "a stream")
    client.xadd(DLQ, {"p": "1", "x-original-stream": "orders", "x-original-group": "g"})
    before = dump_all(client)

    summary = redrive(server, "streams.keys=orders")

    assert dump_all(client) == before
    assert summary.status == "partial"
    assert summary.skipped == [Skipped("orders", None, "orders: the key is not a stream")]


def run_job(*args: str, **kwargs: object) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "jobs/redrive.py", *args], cwd=ROOT, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kwargs)  # type: ignore[call-overload]


def finish(proc: subprocess.Popen[str]) -> tuple[int, dict, str]:
    out, err = proc.communicate(timeout=120)
    return proc.returncode, json.loads(out.strip().splitlines()[-1]), err


@pytest.mark.slow
def test_exit_codes_and_json_summary(redis_server):
    code, summary, err = finish(run_job("--set", "streams.keys=orders", "--set",
                                        "redrive.since=yesterday"))
    assert (code, summary["status"]) == (2, "error")
    assert err.startswith("error: invalid config: redrive.since")
    code, summary, err = finish(run_job("--set", "streams.keys=orders", "--set",
                                        "redrive.from_id=200", "--set", "redrive.to_id=100-5"))
    assert (code, summary["status"]) == (2, "error")
    assert err.startswith("error: redrive range is empty (from 200 to 100-5)")
    code, summary, err = finish(run_job("--set", "streams.keys=orders", "--set",
                                        "redis.url=redis://127.0.0.1:1/0"))
    assert (code, summary["status"]) == (1, "failed")
    assert "cannot reach Redis at 127.0.0.1:1" in err
    code, summary, _ = finish(run_job("--set", "streams.keys=orders", "--dry-run", "--set",
                                      f"redis.url={redis_server.url}"))
    assert (code, summary["status"], summary["dry_run"]) == (0, "ok", True)


# --- Killed halfway and re-run --------------------------------------------------------------

def places(raw: redis.Redis, tail: str) -> Counter[bytes]:
    """How often each entry (its unique `n`) is in the DLQ or back in the source."""
    found = [dict(f)[b"n"] for _, f in entries(raw, DLQ)]
    found += [dict(f)[b"n"] for _, f in entries(raw, "orders", "(" + tail)]
    return Counter(found)


@pytest.mark.slow
def test_killed_redrive_leaves_each_entry_in_one_place_and_a_rerun_finishes(client, server):
    total = 300
    new_group(client, "orders", "billing")
    ids = dead_letter(client, "orders", "billing",
                      [{b"n": str(i).encode(), b"v": b"\x00\xff"} for i in range(total)],
                      [R_LIMIT] * total)
    raw = raw_client(server)
    every = Counter(str(i).encode() for i in range(total))
    base = ["--set", f"redis.url={server.url}", "--set", "streams.keys=orders"]

    slow = run_job(*base, "--set", "redrive.max_entries_per_s=60", "--set",
                   "redrive.batch_size=5")
    deadline = time.monotonic() + 60
    while client.xlen(DLQ) > total - 40 and time.monotonic() < deadline:
        time.sleep(0.02)
    os.kill(slow.pid, signal.SIGKILL)
    slow.wait()

    left = client.xlen(DLQ)
    assert 0 < left <= total - 40, "killed halfway"
    assert places(raw, ids[-1]) == every  # each entry exactly once: DLQ or source

    code, summary, _ = finish(run_job(*base))
    assert code == 0
    assert summary["totals"]["redriven"] == left
    assert client.xlen(DLQ) == 0
    assert places(raw, ids[-1]) == every
    back = entries(raw, "orders", "(" + ids[-1])
    assert all(f[-1] == (COUNTER, b"1") and len(f) == 3 for _, f in back)
