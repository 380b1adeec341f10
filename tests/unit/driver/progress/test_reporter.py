"""Driver-side progress: the reporter's numbers are checked against what Redis holds, on a
real server; the test acts as the job's consumers would (XCLAIM, XACK, XADD to the DLQ).
The reporter's readings (recovery.driver.progress.read), the units a tick reads along the
parts' frontiers (recovery.driver.progress.frontier) and the lines' wording
(recovery.driver.progress.lines, recovery.report.wording) are all checked through it."""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable

import pytest
from redis import Redis

from recovery.driver.discovery import WorkUnit
from recovery.driver.health import clean_up_job_consumers, collect_health
from recovery.driver.job import run
from recovery.driver.progress.reporter import ProgressReporter
from recovery.driver.progress.state import MAX_STREAM_LINES
from recovery.params import RedisParams
from recovery.redis_io.dlq_names import DeadLetterNames, dead_letter_key
from recovery.redis_io.redis_conn import RedisConn
from recovery.testing.backlog import add_entries, create_group, deliver, make_stuck
from recovery.testing.local_redis import LocalServer
from tests.support import backlogs
from tests.support.servers import start_server

PREFIX, RUN = "recovery", "run7"
JOB = [f"{PREFIX}-{RUN}-{part}" for part in range(2)]
OTHER_RUN = f"{PREFIX}-run70-0"  # an earlier run's consumer: never counted as this run's
GROUP = "workers"
DEAD = "worker-dead"
PARTIAL = (r" \(read ([\d,]+) of ([\d,]+) unfinished streams, the others as last read"
           r"(?:; the job has reached about [\d,]+ of [\d,]+)?\)")
TOTALS = re.compile(
    rf"^progress (final )?\d+ s(?: \(as of the reading at \d+ s\))?(?:{PARTIAL})?: (.*)$")
PASSWORD = "pw-never-in-a-log-9f3c"


def seed(client: Redis, streams: list[str], per_stream: int, groups: tuple[str, ...] = (GROUP,)
         ) -> dict[str, list[str]]:
    """`per_stream` entries per stream, pending on a dead consumer in each group; their IDs."""
    ids = {}
    for stream in streams:
        add_entries(client, stream, per_stream, lambda i: {"n": str(i)})
        for group in groups:
            create_group(client, stream, group)
            ids[stream] = deliver(client, stream, group, DEAD, per_stream)
    return ids


def units_of(client: Redis, pairs: list[tuple[str, str]]) -> list[WorkUnit]:
    """WorkUnits as discovery makes them (PEL size from XINFO GROUPS)."""
    units = []
    for stream, group in pairs:
        info = next(g for g in client.xinfo_groups(stream) if g["name"].decode() == group)
        units.append(WorkUnit(stream, group, int(info["pending"])))
    return units


def seeded_units(client: Redis, streams: list[str], per_stream: int
                 ) -> tuple[dict[str, list[str]], list[WorkUnit]]:
    """`seed` in one group, and the units as discovery makes them."""
    ids = seed(client, streams, per_stream)
    return ids, units_of(client, [(s, GROUP) for s in streams])


def reporter(server: LocalServer, units: list[WorkUnit], interval_s: float,
             params: RedisParams | None = None, from_health: bool = False
             ) -> ProgressReporter:
    """A reporter for `units`; `from_health`: its baseline is the group health, read here
    as the job reads it just before its pass."""
    conn = RedisConn.open(params or RedisParams(url=server.url))
    health = collect_health(conn, units, DeadLetterNames()) if from_health else None
    return ProgressReporter(conn, units, DeadLetterNames(), PREFIX, RUN, interval_s, health)


def one_stream_reporter(server: LocalServer, interval_s: float) -> tuple[Redis, ProgressReporter]:
    """A client and a reporter for one stream ("orders") with 5 stuck entries."""
    client = server.client()
    seed(client, ["orders"], 5)
    return client, reporter(server, units_of(client, [("orders", GROUP)]), interval_s)


def progress_lines(caplog: pytest.LogCaptureFixture, level: int = logging.INFO) -> list[str]:
    return [r.getMessage() for r in list(caplog.records)
            if r.name == "recovery.driver.progress" and r.levelno == level]


def totals(caplog: pytest.LogCaptureFixture) -> list[str]:
    """The totals part of every totals line so far (after ``progress <n> s: ``)."""
    return [m.group(4) for line in progress_lines(caplog) if (m := TOTALS.match(line))]


def partial_reads(caplog: pytest.LogCaptureFixture) -> list[tuple[str, str] | None]:
    """Per totals line: (streams read, streams unfinished) when the tick read only some of
    the unfinished streams, else None."""
    return [(m.group(2), m.group(3)) if m.group(2) else None
            for line in progress_lines(caplog) if (m := TOTALS.match(line))]


def unit_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [line for line in progress_lines(caplog)
            if not TOTALS.match(line) and not line.startswith("progress start: ")]


def wait_for(condition: Callable[[], bool], timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def expected(done: int, at_start: int, dead: int, held: int, still: int, finished: int,
             units: int, vanished: int = 0) -> str:
    line = (f"{done:,} of {at_start:,} pending entries done ({done * 100 // at_start}%), "
            f"{dead:,} dead-lettered, {held + still:,} still pending ({held:,} of them held "
            f"by the job); {finished} of {units} streams finished")
    return line + (f" ({vanished} vanished)" if vanished else "")


def pending_reads(client: Redis) -> int:
    """XPENDING calls the server has run so far (those inside scripts included)."""
    return int(client.info("commandstats").get("cmdstat_xpending", {}).get("calls", 0))


def consumer_names(client: Redis, stream: str, group: str = GROUP) -> set[str]:
    return {c["name"].decode() for c in client.xinfo_consumers(stream, group)}


def redis_totals(client: Redis, base: dict[str, int], gone: list[int], group: str,
                 held_by: Callable[[str], bool], dlqs: list[str]) -> str:
    """The totals a final line should show, read from Redis itself: XPENDING of each live
    stream of `base` (its pending count at the start), consumers `held_by` the run; `gone`:
    the baselines of the units that vanished (all done, finished); the DLQs' XLEN (empty at
    the start)."""
    now = {s: client.xpending(s, group) for s in base}
    pending = sum(x["pending"] for x in now.values())
    held = {s: sum(c["pending"] for c in x["consumers"] if held_by(c["name"].decode()))
            for s, x in now.items()}
    finished = sum(held[s] == 0 and now[s]["pending"] < base[s] for s in base) + len(gone)
    at_start = sum(base.values()) + sum(gone)
    return expected(at_start - pending, at_start, sum(client.xlen(k) for k in dlqs),
                    sum(held.values()), pending - sum(held.values()), finished,
                    len(base) + len(gone), vanished=len(gone))


def claim(client: Redis, stream: str, consumer: str, ids: list[str]) -> None:
    client.xclaim(stream, GROUP, consumer, 0, ids, justid=True)  # type: ignore[arg-type]


def dead_letter(client: Redis, stream: str, dlq: str, ids: list[str]) -> None:
    """The job's move, in one transaction: XADD each to the DLQ, then XACK."""
    pipe = client.pipeline(transaction=True)
    for entry_id in ids:
        pipe.xadd(dlq, {"x-original-id": entry_id})
    pipe.xack(stream, GROUP, *ids)
    pipe.execute()


@pytest.fixture
def caplog_info(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.INFO, logger="recovery.driver.progress")
    return caplog


@pytest.mark.parametrize("from_health", [False, True], ids=["read", "from-health"])
def test_totals_and_stream_lines_match_redis(server, caplog_info, from_health):
    caplog = caplog_info
    client = server.client()
    streams = ["orders", "payments", "shipments{eu}"]
    ids = seed(client, streams, 50)
    client.xadd("{payments}:dlq", {"earlier": "run"})  # dead letters of an earlier run
    units = units_of(client, [(s, GROUP) for s in streams])
    with reporter(server, units, 0.1, from_health=from_health) as rep:
        assert rep.running
        assert progress_lines(caplog)[0] == (
            "progress start: 150 pending entries in 3 streams; a progress line every 0.1 s")
        wait_for(lambda: len(totals(caplog)) >= 1)
        assert totals(caplog)[-1] == expected(0, 150, 0, 0, 150, 0, 3)
        claim(client, "orders", JOB[0], ids["orders"][:30])
        client.xack("orders", GROUP, *ids["orders"][:20])
        claim(client, "payments", JOB[1], ids["payments"][:10])
        dead_letter(client, "payments", "{payments}:dlq", ids["payments"][:4])
        claim(client, "shipments{eu}", OTHER_RUN, ids["shipments{eu}"][:5])
        # done 20 + 4, held 10 + 6, dead 4 (the earlier run's dead letter is not counted)
        want = expected(24, 150, 4, 16, 110, 0, 3)
        wait_for(lambda: want in totals(caplog))
        client.xack("orders", GROUP, *ids["orders"][20:30])  # the job is done with orders
        want = expected(34, 150, 4, 6, 110, 1, 3)
        wait_for(lambda: want in totals(caplog))
    final = [line for line in progress_lines(caplog) if line.startswith("progress final ")]
    assert len(final) == 1 and final[0].endswith(": " + want)
    assert progress_lines(caplog)[-1] == final[0]
    assert not rep.running
    lines = unit_lines(caplog)
    orders = [line for line in lines if line.startswith("progress orders / workers: ")]
    payments = [line for line in lines if line.startswith("progress payments / workers: ")]
    assert orders[-1].endswith(" -> 20 (job holds 0), finished")
    assert re.search(r" -> 46 \(job holds 6\)(, dead-lettered \+4)?$", payments[-1])
    assert any(", dead-lettered +4" in line for line in payments)
    assert not [line for line in lines if "shipments" in line]  # another run's claim
    assert not progress_lines(caplog, logging.WARNING)


def test_stream_lines_largest_change_first_at_most_20(server, caplog_info):
    caplog = caplog_info
    client = server.client()
    streams = [f"s{i:02d}" for i in range(MAX_STREAM_LINES + 5)]
    ids = seed(client, streams, 30)
    units = units_of(client, [(s, GROUP) for s in streams])
    with reporter(server, units, 60) as rep:
        changed = streams[: MAX_STREAM_LINES + 2]
        for n, stream in enumerate(changed):  # s00 acks 1, s01 acks 2, ...
            client.xack(stream, GROUP, *ids[stream][: n + 1])
        caplog.clear()
        rep.report()
        lines = unit_lines(caplog)
        assert len(lines) == MAX_STREAM_LINES + 1
        assert lines[0] == "progress s21 / workers: pending 30 -> 8 (job holds 0), finished"
        assert lines[1] == "progress s20 / workers: pending 30 -> 9 (job holds 0), finished"
        assert [line.split(" ")[1] for line in lines[:-1]] == [
            f"s{i:02d}" for i in range(21, 1, -1)]
        assert lines[-1] == "progress ... and 2 more streams changed"
        caplog.clear()
        rep.report()  # nothing changed since
        assert unit_lines(caplog) == []
        assert totals(caplog) == [expected(253, 750, 0, 0, 497, 22, 25)]


def test_groups_of_one_stream_share_its_dead_letter_stream(server, caplog_info):
    caplog = caplog_info
    client = server.client()
    ids = seed(client, ["orders"], 10, groups=("workers", "audit"))
    units = units_of(client, [("orders", "workers"), ("orders", "audit")])
    with reporter(server, units, 60) as rep:
        dead_letter(client, "orders", "{orders}:dlq", ids["orders"][:3])  # workers only
        caplog.clear()
        rep.report()
    assert unit_lines(caplog) == [
        "progress orders / workers: pending 10 -> 7 (job holds 0), dead-lettered +3 (the "
        "stream's DLQ, shared by its 2 groups), finished",
        "progress orders / audit: pending 10 -> 10 (job holds 0), dead-lettered +3 (the "
        "stream's DLQ, shared by its 2 groups)",
    ]
    assert totals(caplog)[-1] == expected(3, 20, 3, 0, 17, 1, 2)  # counted once


def test_vanished_units_warn_once_and_count_as_finished(server, caplog_info):
    caplog = caplog_info
    client = server.client()
    streams = ["orders", "payments", "shipments{eu}", "invoices"]
    seed(client, streams, 20)
    units = units_of(client, [(s, GROUP) for s in streams])
    with reporter(server, units, 0.1):
        wait_for(lambda: len(totals(caplog)) >= 1)
        pipe = client.pipeline(transaction=True)
        pipe.delete("orders")                      # stream gone: NOGROUP
        pipe.xgroup_destroy("payments", GROUP)     # group gone: NOGROUP
        pipe.delete("shipments{eu}")
        pipe.set("shipments{eu}", "not a stream")  # WRONGTYPE
        pipe.execute()
        want = expected(60, 80, 0, 0, 20, 3, 4, vanished=3)
        wait_for(lambda: len([t for t in totals(caplog) if t == want]) >= 3)
    warnings = progress_lines(caplog, logging.WARNING)
    for name in ("orders / workers", "payments / workers", "shipments{eu} / workers"):
        assert sum(name in w for w in warnings) == 1, warnings
    assert all("vanished" in w for w in warnings)
    assert "progress orders / workers: gone (stream or group deleted), counted as finished" in (
        unit_lines(caplog))
    assert not [line for line in unit_lines(caplog) if "invoices" in line]
    assert totals(caplog)[-1] == want


@pytest.mark.slow
def test_redis_down_warns_once_per_tick_and_never_raises_or_logs_the_password(caplog_info):
    caplog = caplog_info
    server = start_server("redis")
    try:
        server.client().config_set("requirepass", PASSWORD)
        client = server.client(password=PASSWORD)
        seed(client, ["orders"], 10)
        units = units_of(client, [("orders", GROUP)])
        params = RedisParams(url=server.url, password=PASSWORD, connect_timeout_s=0.5)
        with reporter(server, units, 0.1, params):
            wait_for(lambda: len(totals(caplog)) >= 1)
            server.kill()
            wait_for(lambda: len(progress_lines(caplog, logging.WARNING)) >= 1)
        ticks_after_kill = len(progress_lines(caplog, logging.WARNING))
    finally:
        server.stop()
    warnings = progress_lines(caplog, logging.WARNING)
    assert all("cannot read Redis" in w and "cannot reach Redis at 127.0.0.1:" in w
               for w in warnings), warnings
    assert len(warnings) <= ticks_after_kill + 1  # the ticks that failed, and the final read
    final = progress_lines(caplog)[-1]
    assert re.match(r"progress final \d+ s \(as of the reading at \d+ s\): ", final), final
    assert final.endswith(expected(0, 10, 0, 0, 10, 0, 1))
    assert not [r for r in caplog.records if PASSWORD in r.getMessage()]


def test_interval_0_starts_no_thread_and_reads_nothing(server, caplog_info):
    caplog = caplog_info
    client, rep = one_stream_reporter(server, 0)
    client.config_resetstat()
    threads = threading.active_count()
    with rep:
        assert not rep.running
        assert threading.active_count() == threads
        time.sleep(0.2)
    stats = client.info("commandstats")
    assert "cmdstat_xpending" not in stats and "cmdstat_xlen" not in stats, stats
    assert progress_lines(caplog) == []


def test_exit_is_prompt_with_a_long_interval_and_keeps_the_runs_error(server, caplog_info):
    caplog = caplog_info
    _, rep = one_stream_reporter(server, 60)
    with pytest.raises(RuntimeError, match="the stage failed"), rep:
        assert rep.running
        time.sleep(0.1)
        started = time.monotonic()
        raise RuntimeError("the stage failed")
    took = time.monotonic() - started
    assert took < 1.0, took
    assert not rep.running
    # No tick in 60 s: the start line and the final line, read at exit.
    start, final = progress_lines(caplog)
    assert start == "progress start: 5 pending entries in 1 stream; a progress line every 60 s"
    assert final.startswith("progress final 0 s: ")
    assert totals(caplog) == [expected(0, 5, 0, 0, 5, 0, 1)]


def test_ticks_read_a_slice_of_the_unfinished_units_and_the_final_line_all(
        server, caplog_info, monkeypatch):
    """With more units than a tick reads, each tick reads the next ones not finished (round
    robin), the others keep their last numbers; the final reading reads every unit."""
    monkeypatch.setattr("recovery.driver.progress.reporter.UNITS_PER_TICK", 2)
    caplog = caplog_info
    client = server.client()
    streams = [f"s{i}" for i in range(6)]
    ids, units = seeded_units(client, streams, 10)

    def tick(want: str, unfinished: int | None) -> None:
        """A tick reading 2 units; the line says of how many unfinished ones, if fewer."""
        reads = pending_reads(client)
        rep.report()
        assert pending_reads(client) - reads == 2
        assert totals(caplog)[-1] == want
        assert partial_reads(caplog)[-1] == (("2", str(unfinished)) if unfinished else None)

    with reporter(server, units, 60) as rep:
        for stream in ("s0", "s1"):
            client.xack(stream, GROUP, *ids[stream])
        client.xack("s3", GROUP, *ids["s3"][:4])
        tick(expected(20, 60, 0, 0, 40, 2, 6), 6)  # s0, s1
        tick(expected(24, 60, 0, 0, 36, 3, 6), 4)  # s2, s3
        client.xack("s2", GROUP, *ids["s2"][:1])
        client.xack("s5", GROUP, *ids["s5"])
        tick(expected(34, 60, 0, 0, 26, 4, 6), 3)  # s4, s5: s2's ack not seen yet (s3 is
        # finished: fewer pending than at the start, none held)
        tick(expected(35, 60, 0, 0, 25, 5, 6), None)  # s2, s4, the only unfinished ones
        client.xadd("s1", {"late": "1"})
        client.xreadgroup(GROUP, "live", {"s1": ">"})
        reads = pending_reads(client)
    assert pending_reads(client) - reads == 6  # the final reading: every unit
    assert totals(caplog)[-1] == expected(34, 60, 0, 0, 26, 5, 6)
    assert partial_reads(caplog)[-1] is None


def test_final_line_uses_the_clean_ups_summaries_and_matches_redis(server, caplog_info):
    """The consumer clean-up reads each group's PEL summary once, however many of its
    consumers are targets, deletes the job's consumers (this run's and earlier runs') that
    own nothing, and hands the summaries to the final reading, which then reads no XPENDING
    of its own; a vanished group and a replaced key cost only their units."""
    caplog = caplog_info
    client = server.client()
    streams = ["orders", "payments", "refunds", "shipments{eu}", "invoices"]
    ids = seed(client, streams, 20)
    client.xgroup_createconsumer("orders", GROUP, OTHER_RUN)  # an earlier run's, empty
    claim(client, "payments", OTHER_RUN, ids["payments"][:4])  # an earlier run's, owning 4
    for stream in ("payments", "refunds"):
        client.xgroup_createconsumer(stream, GROUP, "app-idle")  # the application's, empty
    units = units_of(client, [(s, GROUP) for s in streams])
    conn = RedisConn.open(RedisParams(url=server.url))
    health = collect_health(conn, units, DeadLetterNames())
    own = [(s, GROUP, JOB[i % 2]) for i, s in enumerate(streams)]
    with ProgressReporter(conn, units, DeadLetterNames(), PREFIX, RUN, 60, health) as rep:
        claim(client, "orders", JOB[0], ids["orders"][:5])
        client.xack("orders", GROUP, *ids["orders"][:2])  # JOB[0] still owns 3
        claim(client, "payments", JOB[1], ids["payments"][4:10])
        dead_letter(client, "payments", "{payments}:dlq", ids["payments"][4:10])
        claim(client, "refunds", JOB[0], ids["refunds"])
        client.xack("refunds", GROUP, *ids["refunds"])
        client.xgroup_destroy("shipments{eu}", GROUP)  # NOGROUP
        client.delete("invoices")
        client.set("invoices", "not a stream")  # WRONGTYPE
        reads = pending_reads(client)
        cleaned = clean_up_job_consumers(conn, health, own, PREFIX)
        assert pending_reads(client) - reads == len(streams)  # one per group, not per target
        rep.take_final_summaries(cleaned.summaries)
        reads = pending_reads(client)
    assert pending_reads(client) == reads  # the final reading read no summary of its own
    assert cleaned.removed == 3
    assert consumer_names(client, "orders") == {DEAD, JOB[0]}  # owns 3: kept
    assert consumer_names(client, "payments") == {DEAD, OTHER_RUN, "app-idle"}
    assert consumer_names(client, "refunds") == {DEAD, "app-idle"}
    want = redis_totals(client, {s: 20 for s in streams[:3]}, [20, 20], GROUP,
                        lambda name: name in JOB, ["{payments}:dlq"])
    assert want == expected(68, 100, 6, 3, 29, 4, 5, vanished=2)
    final = [line for line in progress_lines(caplog) if line.startswith("progress final ")]
    assert len(final) == 1 and final[0].endswith(": " + want), final
    (warning,) = progress_lines(caplog, logging.WARNING)
    assert "2 vanished" in warning and "could not be read" not in warning, warning
    assert "shipments{eu} / workers" in warning and "invoices / workers" in warning


@pytest.mark.slow
def test_a_runs_final_line_matches_redis_and_only_empty_job_consumers_go(
        spark, server, make_settings, caplog_info):
    """End to end: the final progress line of a run shows what XPENDING and XLEN show after
    it; the clean-up removed this run's and an earlier run's consumers that own nothing,
    and kept those that own entries and every consumer of the application."""
    caplog = caplog_info
    client = server.client()
    backlogs.seed(client, ["orders", "bin{tag}"], ["billing"])
    add_entries(client, "plain", 5, lambda i: backlogs.binary_fields(i, "ok"))  # no failures
    create_group(client, "plain", "billing")
    make_stuck(client, "plain", "billing", DEAD,
               deliver(client, "plain", "billing", DEAD, 5), backlogs.HOUR_MS)
    client.xgroup_createconsumer("orders", "billing", "recovery-earlier-0")  # empty
    add_entries(client, "orders", 3, lambda i: {"late": str(i)})
    deliver(client, "orders", "billing", "recovery-earlier-1", 3)  # fresh: not claimed
    client.xgroup_createconsumer("orders", "billing", "app-idle")
    base = {s: client.xpending(s, "billing")["pending"] for s in ("orders", "bin{tag}", "plain")}
    summary = run(spark, make_settings(
        "streams.match=*", "claim.max_deliveries=5", "report.progress_interval_s=60",
        "handler.path=tests.support.handlers:verify_or_fail"))
    stem = f"recovery-{summary.run_id}-"
    want = redis_totals(client, base, [], "billing", lambda name: name.startswith(stem),
                        [dead_letter_key(s, ":dlq") for s in base])
    final = [line for line in progress_lines(caplog) if line.startswith("progress final ")]
    assert len(final) == 1 and final[0].endswith(": " + want), (final, want)
    assert want == expected(2 * 146 + 5, 2 * 166 + 8, 2 * 18, 2 * 10, 2 * 10 + 3, 1, 3)
    orders = consumer_names(client, "orders", "billing")
    assert {n for n in orders if not n.startswith(stem)} == {
        backlogs.DEAD, backlogs.LIVE, "app-idle", "recovery-earlier-1"}
    assert len([n for n in orders if n.startswith(stem)]) == 1  # holds the failed entries
    assert consumer_names(client, "plain", "billing") == {backlogs.DEAD}


def length_reads(client: Redis) -> int:
    """XLEN calls the server has run so far."""
    return int(client.info("commandstats").get("cmdstat_xlen", {}).get("calls", 0))


def test_a_dead_letter_stream_is_read_again_only_when_a_pel_of_its_stream_changed(
        server, caplog_info):
    """A reading reads a dead-letter stream's length only when a PEL summary of one of its
    stream's units changed since the length was read: not on a quiet tick, nor at a tick
    while every unit of the stream is as at the baseline (the health read the lengths), yes
    when a group of a stream of two groups changed, and, at the final reading, yes when
    entries left a PEL and as many new ones came to the same consumer (same count and first
    ID; the last ID tells). The totals still match XPENDING and XLEN."""
    caplog = caplog_info
    client = server.client()
    ids = seed(client, ["a", "b"], 10)
    ids |= seed(client, ["c"], 10, groups=(GROUP, "audit"))
    pairs = [("a", GROUP), ("b", GROUP), ("c", GROUP), ("c", "audit")]
    dlqs = [dead_letter_key(s, ":dlq") for s in ("a", "b", "c")]
    with reporter(server, units_of(client, pairs), 60, from_health=True) as rep:

        def tick() -> int:
            """XLEN calls of one tick."""
            reads = length_reads(client)
            rep.report()
            return length_reads(client) - reads

        assert tick() == 0  # no unit reached by the job yet: the health's lengths hold
        assert tick() == 0  # nothing changed
        claim(client, "a", JOB[0], ids["a"][:2])
        dead_letter(client, "a", dlqs[0], ids["a"][:2])
        assert tick() == 1
        assert totals(caplog)[-1] == expected(2, 40, 2, 0, 38, 1, 4)
        client.xack("c", "audit", ids["c"][0])
        assert tick() == 1  # c's dead-letter stream, shared by its two groups
        claim(client, "b", JOB[1], ids["b"][3:6])
        dead_letter(client, "b", dlqs[1], ids["b"][3:6])
        add_entries(client, "b", 3, lambda i: {"late": str(i)})
        deliver(client, "b", GROUP, DEAD, 3)
        reads = length_reads(client)
    assert length_reads(client) - reads == 1  # the final reading: b's
    pending = sum(client.xpending(s, g)["pending"] for s, g in pairs)
    dead = sum(client.xlen(k) for k in dlqs)
    assert (pending, dead) == (37, 5)
    final = [line for line in progress_lines(caplog) if line.startswith("progress final ")]
    assert final[0].endswith(": " + expected(40 - pending, 40, dead, 0, pending, 2, 4)), final


def test_a_tick_reads_a_length_the_baseline_could_not_read_even_before_the_job_comes(
        server, caplog_info):
    """The health could not read the dead-letter length (the key held a string then): the
    first tick reads it although the job has not reached the unit, so the job's later moves
    count from there, not from a length read after them."""
    caplog = caplog_info
    client = server.client()
    ids = seed(client, ["a"], 10)
    dlq = dead_letter_key("a", ":dlq")
    client.set(dlq, "not a stream")
    with reporter(server, units_of(client, [("a", GROUP)]), 60, from_health=True) as rep:
        client.delete(dlq)
        for n in range(2):
            client.xadd(dlq, {"earlier": str(n)})  # dead letters of someone else, or before
        reads = length_reads(client)
        rep.report()
        assert length_reads(client) - reads == 1
        claim(client, "a", JOB[0], ids["a"][:3])
        dead_letter(client, "a", dlq, ids["a"][:3])
    assert client.xlen(dlq) == 5
    assert totals(caplog)[-1] == expected(3, 10, 3, 0, 7, 1, 1)


def test_ticks_read_along_the_parts_frontiers_and_keep_up_with_the_job(
        server, caplog_info, monkeypatch):
    """Given the order each part takes its units in, a tick reads each part's unfinished
    units up to a little beyond the furthest one the job reached (further while it keeps
    finding reached ones), not the units beyond; its totals match XPENDING and XLEN; a
    finished unit is not read again; a tick stopped short by its limit says so, and about
    how far the job has gone (a binary search over the parts' units)."""
    monkeypatch.setattr("recovery.driver.progress.frontier.CHUNK", 4)
    caplog = caplog_info
    client = server.client()
    streams = [f"s{i:02}" for i in range(40)]
    ids, units = seeded_units(client, streams, 3)
    order = [list(range(0, 40, 2)), list(range(1, 40, 2))]  # part 0: s00, s02, ...
    params = RedisParams(url=server.url)
    dlqs = [dead_letter_key(s, ":dlq") for s in streams]

    def tick(rep: ProgressReporter, want: str | None = None) -> int:
        """A tick; its XPENDING calls. Its totals are checked against `want`, by default
        against Redis."""
        reads = pending_reads(client)
        rep.report()
        reads = pending_reads(client) - reads
        assert totals(caplog)[-1] == (want or redis_totals(
            client, dict.fromkeys(streams, 3), [], GROUP, lambda n: n in JOB, dlqs))
        return reads

    def job_takes(part: int, positions: range, ack: bool = True) -> None:
        """The job's consumer of `part` claims its units at `positions`; dead-letters the
        first entry of each and acks the others (`ack`), or keeps them held."""
        for pos in positions:
            stream = streams[order[part][pos]]
            claim(client, stream, JOB[part], ids[stream])
            if ack:
                dead_letter(client, stream, dead_letter_key(stream, ":dlq"), ids[stream][:1])
                client.xack(stream, GROUP, *ids[stream][1:])

    with ProgressReporter(RedisConn.open(params), units, DeadLetterNames(), PREFIX, RUN, 60,
                          order=order) as rep:
        assert tick(rep) == 8  # 4 per part: nothing reached
        job_takes(0, range(10))
        job_takes(1, range(3), ack=False)
        client.xack(streams[39], GROUP, ids[streams[39]][0])  # a live consumer, far ahead
        # part 0: 4, 4 more, 4 more, then 6 beyond the tenth (growing by half what it read);
        # part 1: 4, then 4 more beyond its third. s39's ack shows only at the final reading.
        assert tick(rep, expected(10 * 3, 120, 10, 9, 81, 10, 40)) == 18 + 8
        assert partial_reads(caplog)[-1] is None
        job_takes(1, range(3))  # acks what it held
        job_takes(1, range(3, 6))
        # part 0: from its first unfinished unit (s20) as far as the job went at the last
        # tick (10), nothing reached; part 1: from its first unit (none was finished), 3 + 4
        # units, then 4 more
        assert tick(rep, expected(16 * 3, 120, 16, 0, 72, 16, 40)) == 10 + 11
        assert tick(rep, expected(16 * 3, 120, 16, 0, 72, 16, 40)) == 4 + 4  # 4 beyond each
        monkeypatch.setattr("recovery.driver.progress.reporter.UNITS_PER_TICK", 5)
        job_takes(0, range(10, 20))
        # 3 of part 0's (s20, s22, s24), 2 of part 1's: the job's s26 to s38 not seen yet;
        # then how far the job went, in a binary search to within 4 units: part 0 probes
        # its 16th unit (reached), part 1 its 12th and 8th (not reached)
        assert tick(rep, expected(19 * 3, 120, 19, 0, 63, 19, 40)) == 5 + 3
        assert partial_reads(caplog)[-1] == ("5", str(40 - 16))
        line = [line for line in progress_lines(caplog) if TOTALS.match(line)][-1]
        assert "; the job has reached about 23 of 40): " in line, line
        reads = pending_reads(client)
    assert pending_reads(client) - reads == 40  # the final reading: every unit
    assert totals(caplog)[-1] == redis_totals(
        client, dict.fromkeys(streams, 3), [], GROUP, lambda n: n in JOB, dlqs)
    assert totals(caplog)[-1] == expected(20 * 3 + 6 * 3 + 1, 120, 26, 0, 41, 27, 40)


def test_still_pending_is_what_redis_has_pending_and_adds_up_with_done(server, caplog_info):
    """A line said "0 still pending; 0 of 2 streams finished" beside "pending 20 -> 2 (job
    holds 2)": its still-pending left out what the job held. The totals line's still-pending
    is now the groups' XPENDING count, and done + still pending is the pending at the start."""
    caplog = caplog_info
    client = server.client()
    ids = seed(client, ["sp-a", "sp-b"], 20)
    units = units_of(client, [(s, GROUP) for s in ("sp-a", "sp-b")])
    with reporter(server, units, 0.1) as rep:
        assert rep.running
        for stream in ("sp-a", "sp-b"):
            claim(client, stream, JOB[0], ids[stream][:20])
            client.xack(stream, GROUP, *ids[stream][:18])  # 2 left, held by the job
        want = sum(client.xpending(s, GROUP)["pending"] for s in ("sp-a", "sp-b"))
        assert want == 4
        wait_for(lambda: "36 of 40 pending entries done" in (totals(caplog) or [""])[-1])
    line = totals(caplog)[-1]
    assert f"{want} still pending (4 of them held by the job)" in line, line
    assert "0 of 2 streams finished" in line, line  # the job still holds entries of both
