"""Attacks on the keeper of abandoned handler calls (recovery/executor/handover/abandoned.py)
through a Redis that drips or stalls its replies, or never answers the handshake, exactly on
the keeper's own connections (tests/support/keeper_drip.py), and through a Redis that
answers LOADING and NOSCRIPT at its renewals. ATTACKS.md "Dependencies that misbehave".

Each test proves its fault (bytes dripped, replies held, LOADING seen) and checks Redis
itself: XPENDING owners and idle times, the handler's records (``SEEN`` / ``DONE``)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from recovery.redis_io.dlq_names import dead_letter_key
from recovery.testing.local_redis import LocalServer
from tests.support.fault_tools import job_args, run_in_process, wait_until, write_control
from tests.support.hung_calls import (
    FILE_HANG,
    MIN_IDLE_MS,
    OPTS,
    file_beating,
    first_run_hangs_on_head,
    key_hung_on_file,
    pel_of,
    second_run_past,
)
from tests.support.keeper_drip import (
    KeeperDrip,
    flush_scripts_once,
    head_alone,
    idle_ms,
    live_consumer_claims,
)
from tests.support.keeper_handlers import beats
from tests.support.loading_redis import LOAD_KEYS, loading_watch, restart_when, slow_loading_server
from tests.support.order_handler import DONE, SEEN
from tests.support.order_tools import STREAM, args, pending_owners, recorded
from tests.support.redis_drip import cut_seen

FAST_S = 0.5  # redis.socket_timeout_s and connect_timeout_s where the bound is checked
STO_S = 10  # redis.socket_timeout_s of the stalled-thread trial: longer than min_idle_ms
# The LOADING-at-the-first-renewal trial: a timeout the restart lands within on a loaded host.
LOADING_TIMEOUT_S, LOADING_MIN_IDLE_MS = 3, 4500
LOADING_OPTS = (*OPTS, FILE_HANG, f"handler.timeout_s={LOADING_TIMEOUT_S}",
                f"claim.min_idle_ms={LOADING_MIN_IDLE_MS}")


def _started_file(hang_dir: Path, head: str) -> Path:
    """The file the file-hung handler makes when its call on `head` starts."""
    return hang_dir / f"started-{head}"


def _started(hang_dir: Path, head: str):  # type: ignore[no-untyped-def]
    return _started_file(hang_dir, head).exists


@pytest.mark.slow
def test_a_stalled_reply_at_the_keepers_thread_lets_the_lease_lapse_while_the_call_runs(
        spark, redis_server, tmp_path: Path) -> None:
    """FINDING (fixed). Claim (GUARANTEES "Delivery", "Per-key order", abandoned.py): a timed-out
    call's entries stay leased to the job's consumer while it runs, renewed every third of
    claim.min_idle_ms, so no other run (same min_idle_ms) hands them over meanwhile.

    k0 holds H, E2, E3 (per-key order, handler.timeout_s 1, claim.min_idle_ms 1500,
    redis.socket_timeout_s 10: nothing ties it to min_idle_ms). Run 1, through the proxy,
    hangs on H; the keeper's first renewal is served; from its thread's first renewal on,
    the keeper's connections get their replies one byte every 3 s (the request passes at
    once: Redis runs every renewal it is sent). Redis answers everybody else at once.

    Holds would be: H's idle stays below 1500 ms and run 2 (straight to Redis, started once
    the keeper's renewal reply dripped) hands nothing of k0 over while run 1's call runs.
    Found: the keeper's thread waits on the dripping reply for socket_timeout_s (10 s) and
    sends no renewal meanwhile; H's idle passes min_idle_ms (1848 ms, 1501 ms seen) and run 2
    claims H and hands it over again (and E2, E3 after it) while run 1's call on H still
    runs: k0's successes [H, E2, E3] recorded before that call's own H.

    At fault: ``abandoned.py`` ``keep_leased`` opens the keeper's connection with the job's
    redis params (``RedisConn.open(redis_params)``, line 51): each renewal of ``_keep``
    (line 93) may wait socket_timeout_s (+1 s per min_transfer_bytes_per_s) per attempt, 4
    attempts, regardless of its period (a third of min_idle_ms). A stalled reply thus
    spaces the renewals Redis runs by about socket_timeout_s + the backoff: the lease
    lapses whenever that reaches min_idle_ms (default socket_timeout_s 30 s: any
    claim.min_idle_ms up to ~31 s), and nothing checks the two against each other
    (settings/model.py ``_lease_outlasts_handler`` checks handler.timeout_s only)."""
    client, hang_dir, head, later = key_hung_on_file(redis_server, tmp_path)
    reports = tmp_path / "r"
    with KeeperDrip(redis_server.port, armed=_started(hang_dir, head), interval_s=3.0,
                    skip_s=0.25) as drip:
        try:
            first_run_hangs_on_head(spark, drip.url, reports, head, later, FILE_HANG,
                                    f"redis.socket_timeout_s={STO_S}")
            owner = pending_owners(client)[head]
            wait_until(lambda: drip.dripped >= 1, None, 10, "a renewal reply to drip")
            wait_until(lambda: idle_ms(client, head) >= MIN_IDLE_MS or drip.cut > 0, None,
                       STO_S, "H idle min_idle_ms, or the dripping renewal given up")
            idle = idle_ms(client, head)
            second = run_in_process(spark, args(redis_server.url, reports, *OPTS, FILE_HANG))
            still_running = file_beating(hang_dir, head) and \
                not (hang_dir / f"finished-{head}").exists()
            seen, pel = recorded(client, SEEN, ["k0"])["k0"], pel_of(client)
        finally:
            (hang_dir / "release").write_text("1")
    assert drip.renewals >= 2 and drip.dripped >= 1, f"no renewal dripped: {drip}"
    assert still_running, "run 1's call on H ended before run 2 did: no fault to test"
    assert second.code == 0, second.stderr[-3000:]
    assert seen == [head] and pel.get(head, ("",))[0] == owner, (
        f"the keeper's renewal reply dripped ({drip.dripped} bytes, {drip.renewals} renewals "
        f"sent): H ({head}) was idle {idle} ms (claim.min_idle_ms {MIN_IDLE_MS}) while its "
        f"call ran; run 2 handed over {seen} while run 1's call on H still ran; PEL after "
        f"run 2 (owner, idle ms, count): {pel}; run 1's consumer {owner}; successes: "
        f"{recorded(client, DONE, ['k0'])['k0']}")


@pytest.mark.slow
def test_a_stalled_reply_below_min_idle_still_opens_the_lease_to_a_live_consumer(
        spark, redis_server, tmp_path: Path) -> None:
    """FINDING (fixed). The same claim and fault as the test above, with redis.socket_timeout_s 1 s,
    below claim.min_idle_ms (1.5 s): a consumer claiming with min_idle_ms never takes a
    timed-out call's entries while it runs (GUARANTEES "Delivery": "no run and no consumer
    claiming with that idle time").

    Found: each renewal attempt runs at Redis and then waits 1 s for its dripping reply;
    redis-py's retries back off 0.2, 0.4, 0.8 s, so Redis sees renewals up to 1.8 s apart
    (a probe saw H idle up to 1802 ms, 61 of 975 samples at 1500 ms or more, in 10 s): a
    live consumer polling XCLAIM with min-idle 1500 takes H while run 1's call on H
    still runs. Cause as above: the keeper's waits are bounded by socket_timeout_s plus the
    retries' backoff, not by its period (abandoned.py lines 51, 93)."""
    client, hang_dir, head, later = key_hung_on_file(redis_server, tmp_path)
    with KeeperDrip(redis_server.port, armed=_started(hang_dir, head), interval_s=3.0,
                    skip_s=0.25) as drip:
        try:
            first_run_hangs_on_head(spark, drip.url, tmp_path / "r", head, later, FILE_HANG,
                                    "redis.socket_timeout_s=1")
            owner = pending_owners(client)[head]
            taken, top = live_consumer_claims(client, head, hang_dir, 8)
            running = file_beating(hang_dir, head)
            pel = pel_of(client)
        finally:
            (hang_dir / "release").write_text("1")
    assert drip.renewals >= 2 and drip.dripped >= 1, f"no renewal dripped: {drip}"
    assert running, "run 1's call on H ended: no fault to test"
    assert taken == [], (
        f"renewal replies dripped ({drip.dripped} bytes, {drip.cut} given up): H ({head}) "
        f"reached idle {top} ms (claim.min_idle_ms {MIN_IDLE_MS}) while its call ran; a live "
        f"consumer's XCLAIM took {taken}; PEL now {pel}; run 1's consumer {owner}")


@pytest.mark.slow
@pytest.mark.parametrize("dripping", [1, 4], ids=["first-attempt", "every-attempt"])
def test_a_dripping_first_renewal_is_bounded_and_never_hands_the_entry_over_twice(
        spark, redis_server, tmp_path: Path, dripping: int) -> None:
    """HOLDS. Claim (GUARANTEES "Delivery", "Timeouts"): the first renewal, in the task, is
    bounded by socket_timeout_s (plus 1 s per min_transfer_bytes_per_s) with 3 retries; its
    failure fails the task attempt, whose worker exits and ends the call.

    H alone (unordered, socket_timeout_s 0.5). The keeper's first renewal reply drips a byte
    every 0.4 s on its first connection (`first-attempt`: the retry is served, run 1 exits 0,
    H stays leased while its call runs) or its four (`every-attempt`: the task attempt
    fails in its bound, its worker ends the call, Spark's retry calls H again, which
    succeeds once and is acked). Never two calls on H at once, nothing dead-lettered."""
    client = redis_server.client()
    hang_dir, head = head_alone(redis_server, tmp_path)
    with KeeperDrip(redis_server.port, armed=_started(hang_dir, head), interval_s=0.4,
                    drip_connections=dripping) as drip:
        try:
            started = time.monotonic()
            first = run_in_process(spark, job_args(
                drip.url, tmp_path / "r", [STREAM], *OPTS, FILE_HANG,
                f"redis.socket_timeout_s={FAST_S}", f"redis.connect_timeout_s={FAST_S}"))
            took = time.monotonic() - started
            beating = file_beating(hang_dir, head)
            pel = pel_of(client)
            cut = cut_seen(drip, dripping)  # type: ignore[arg-type]
        finally:
            (hang_dir / "release").write_text("1")
    assert drip.faulty == dripping and drip.dripped >= 1, f"no renewal dripped: {drip}"
    assert cut == dripping, f"a dripped renewal was not given up by the job: {drip}"
    assert not client.exists(dead_letter_key(STREAM, ":dlq"))
    if dripping == 1:
        assert first.code == 0, first.stderr[-3000:]
        assert beating, "the abandoned call ended: no lease to keep"
        assert list(pel) == [head] and pel[head][1] < MIN_IDLE_MS, pel
        assert recorded(client, SEEN, ["k0"])["k0"] == [head]
        return
    assert not beating, "run 1's task failed but its abandoned call still runs"
    assert first.code == 0, first.stderr[-3000:]
    assert (recorded(client, DONE, ["k0"])["k0"], pel) == ([head], {}), pel
    assert took < 3 * (4 * FAST_S + 0.7) + 15, took  # Spark's 3 attempts, each bounded


PASSWORD = "keeper-drip-Secret-42"


@pytest.mark.slow
def test_a_keeper_connection_never_answered_fails_the_task_in_bounds_and_ends_the_call(
        spark, redis_server, tmp_path: Path) -> None:
    """HOLDS. Claims (GUARANTEES "Timeouts", "Delivery"): opening a connection is bounded by
    connect_timeout_s and each reply by socket_timeout_s, 3 retries; the first renewal's
    failure fails the task attempt and ends the call; a password is never printed.

    H alone, Redis with a password (redis.password). Every connection opened once H's call
    started gets no reply at all (the proxy accepts, passes the requests on, and drops every
    reply: the AUTH and CLIENT SETNAME of the keeper's handshake, redis.cluster false), for
    the rest of run 1 (Spark's retries too). Run 1 must end within its bounds (3 task
    attempts of 4 bounded tries), exit 1 with one line, H pending, never done; the hung call
    ended with its task; nothing dead-lettered, the password nowhere in the output. (Tried
    also with the first four connections silent and redis.cluster auto, its INFO probe
    silent: Spark's retry served, exit 0, H done once and acked, in 15 s.)"""
    hang_dir, head = head_alone(redis_server, tmp_path)
    redis_server.client().config_set("requirepass", PASSWORD)
    client = redis_server.client(password=PASSWORD)
    write_control(f"redis://:{PASSWORD}@127.0.0.1:{redis_server.port}/0", hang_ids=[head],
                  hang_dir=str(hang_dir))
    with KeeperDrip(redis_server.port, armed=_started(hang_dir, head), mode="silent") as drip:
        try:
            started = time.monotonic()
            first = run_in_process(spark, job_args(
                drip.url, tmp_path / "r", [STREAM], *OPTS, FILE_HANG,
                f"redis.password={PASSWORD}", "redis.cluster=false",
                f"redis.socket_timeout_s={FAST_S}", f"redis.connect_timeout_s={FAST_S}"))
            took = time.monotonic() - started
            beating = file_beating(hang_dir, head)
            pel = pel_of(client)
        finally:
            (hang_dir / "release").write_text("1")
    out = first.stderr + str(first.summary)
    assert drip.faulty >= 4 and drip.held > 0, f"no reply held back: {drip}"
    assert PASSWORD not in out, "the password was printed"
    assert not beating, "run 1's task failed but its abandoned call still runs"
    assert not client.exists(dead_letter_key(STREAM, ":dlq"))
    assert first.code == 1, first.stderr[-3000:]
    (line,) = first.error_lines()
    assert "cannot reach Redis at" in line and "was not done within" in line, line
    assert (first.summary or {}).get("status") == "error", first.summary
    assert took < 3 * (4 * FAST_S + 0.7) + 40, took  # 3 attempts of 4 tries; the defaults: 60+ s
    assert (list(pel), recorded(client, DONE, ["k0"])["k0"]) == ([head], [])


@pytest.fixture
def slow_loading(request: pytest.FixtureRequest) -> Iterator[LocalServer]:
    """A Redis that loads its AOF for seconds when restarted (tests/support/loading_redis)."""
    srv = slow_loading_server(getattr(request, "param", LOAD_KEYS))
    yield srv
    srv.stop()


@pytest.mark.slow
def test_a_restart_that_loads_for_seconds_finds_the_hung_heads_lease_renewed_after(
        spark, slow_loading: LocalServer, tmp_path: Path) -> None:
    """HOLDS. Claims (GUARANTEES "Delivery", "Per-key order", abandoned.py): a renewal that
    fails (Redis restarted) is tried again every 0.5 s while the call runs, so a Redis back
    within claim.min_idle_ms finds the entries leased again; its script is loaded again
    (NOSCRIPT) and the key stays held.

    k0 holds H, E2, E3 (claim.min_idle_ms 6000, per-key order). Run 1's call on H hangs on
    a file. Redis is SIGKILLed and started again on its AOF, which takes seconds to load
    (LOAD_KEYS commands at key-load-delay each): the keeper's thread meets LOADING (INFO
    errorstats errorstat_LOADING counts EVALSHAs refused while loading: nobody else sends
    commands then), then NOSCRIPT (the restart emptied the script cache). After the load,
    H must be leased by run 1's consumer again (idle below min_idle_ms), and run 2, started
    once the call ran 3 s past the restart, hands nothing of k0 over while the call runs."""
    srv = slow_loading
    url = srv.url
    client, hang_dir, head, later = key_hung_on_file(srv, tmp_path)
    reports = tmp_path / "r"
    opts = (*OPTS, FILE_HANG, "claim.min_idle_ms=6000")
    loading: list[float] = []
    stop = threading.Event()
    try:
        first_run_hangs_on_head(spark, url, reports, head, later, FILE_HANG,
                                "claim.min_idle_ms=6000")
        owner = pending_owners(client)[head]
        assert file_beating(hang_dir, head), "the timed-out call is not running: no fault"
        watcher = loading_watch(srv.port, loading, stop)
        srv.restart()
        client = srv.client()
        wait_until(lambda: int(client.info("errorstats").get(
            "errorstat_NOSCRIPT", {"count": 0})["count"]) > 0, None, 10,
                   "the keeper's renewal to meet NOSCRIPT")
        wait_until(lambda: pending_owners(client).get(head) == owner
                   and idle_ms(client, head) < 1000, None, 10, "H leased again")
        errors = client.info("errorstats")
        after_load = pel_of(client)[head]
        still_running, seen, pel = second_run_past(
            spark, client, url, reports, hang_dir, head, [], beats(hang_dir, head),
            "the restart", opts)
    finally:
        stop.set()
        (hang_dir / "release").write_text("1")
    watcher.join(5)
    load_s = (loading[-1] - loading[0]) if loading else 0.0
    assert load_s > 1, f"Redis did not load for seconds: {len(loading)} loading samples"
    assert errors.get("errorstat_LOADING", {"count": 0})["count"] > 0, (
        f"the keeper's renewal never met LOADING: {errors}")
    assert still_running, "run 1's call on H ended before run 2 did: no fault to test"
    assert after_load[0] == owner, (after_load, owner)
    assert seen == [head] and pel[head][0] == owner, (
        f"after a {load_s:.1f} s load ({errors}), run 2 handed over {seen} while run 1's "
        f"call on H ran; PEL (owner, idle ms, count): {pel}; run 1's consumer {owner}")


@pytest.mark.slow
def test_scripts_flushed_while_a_call_hangs_are_loaded_again_by_its_keeper(
        spark, redis_server, tmp_path: Path) -> None:
    """HOLDS. Claims (abandoned.py, GUARANTEES "Per-key order"): the keeper's renewals load
    their script again after NOSCRIPT, at the first renewal (in the task) and in its thread,
    and the hung head keeps its key held.

    k0 holds H, E2, E3 (claim.min_idle_ms 1500). Once run 1's call on H started, SCRIPT
    FLUSH (before the 1 s timeout: the keeper's first renewal, on its fresh connection, meets
    NOSCRIPT); once run 1 exited, SCRIPT FLUSH again (the thread's next renewal meets it).
    Proved: the keeper's connections (opened after the call started, watched by a proxy that
    passes everything) sent SCRIPT LOAD after each flush. Run 1 exits 0 (H failed, E2, E3
    held); run 2, started once the call ran 3 s past the second flush, hands nothing of k0
    over while the call runs; H stays run 1's."""
    client, hang_dir, head, later = key_hung_on_file(redis_server, tmp_path)
    reports = tmp_path / "r"
    flushed: list[int] = []
    with KeeperDrip(redis_server.port, armed=_started(hang_dir, head), mode="watch") as watch:
        try:
            flusher = flush_scripts_once(client, _started(hang_dir, head), flushed)
            first_run_hangs_on_head(spark, watch.url, reports, head, later, FILE_HANG)
            flusher.join(10)
            loads_first = watch.loads
            owner = pending_owners(client)[head]
            client.script_flush()
            wait_until(lambda: watch.loads > loads_first, None, 10,
                       "the keeper's thread to load its script again")
            still_running, seen, pel = second_run_past(
                spark, client, redis_server.url, reports, hang_dir, head, later,
                beats(hang_dir, head), "the second flush")
        finally:
            (hang_dir / "release").write_text("1")
    assert flushed and loads_first >= 1, f"the first renewal never met NOSCRIPT: {watch}"
    assert still_running, "run 1's call on H ended before run 2 did: no fault to test"
    assert seen == [head] and pel[head][0] == owner, (
        f"scripts flushed twice ({watch.loads} SCRIPT LOADs by the keeper): run 2 handed "
        f"over {seen} while run 1's call on H ran; PEL: {pel}; run 1's consumer {owner}")


@pytest.mark.slow
@pytest.mark.parametrize("slow_loading", [3 * LOAD_KEYS], indirect=True)  # a loaded host too
def test_loading_at_the_first_renewal_never_hands_the_entry_over_while_its_call_runs(
        spark, slow_loading: LocalServer, tmp_path: Path) -> None:
    """HOLDS. Claims (GUARANTEES "Delivery", abandoned.py): the first renewal's failure (here
    LOADING) fails the task attempt, whose worker ends the call; Spark's retry or the run's
    one line follows; the entry is never handed over while the call runs.

    H alone (unordered; run 2 in per-key order; handler.timeout_s 3 s, claim.min_idle_ms
    4500, so that the restart lands before the timeout on a loaded host too: with a 1 s
    timeout, a restart 1 s late let the renewal through before it). Once run 1's call on H
    started, Redis is SIGKILLed and started again on an AOF that loads for ~7 s, so the
    keeper's first renewal, at the timeout, finds Redis loading. Proved: the load spans the
    timeout (counted from the call's start: its file's time), and Redis counts EVALSHAs
    refused (INFO commandstats rejected_calls; the first EVALSHA
    after the restart is the keeper's). Either the renewal gets through within redis-py's
    retries once the load ends (seen: 3 refused, the 4th served; accepts wait for the
    loader's event rounds): run 1 exits 0, H leased again by run 1's consumer, and run 2,
    once the call ran 3 s more, hands nothing over while it runs; or it fails the task: its
    worker ends the call, and run 1 exits 0 with H done once and acked (Spark's retry after
    the load) or 1 with one line, H pending and never done. Nothing dead-lettered."""
    srv = slow_loading
    hang_dir, head = head_alone(srv, tmp_path)
    loading: list[float] = []
    timeout_at: list[float] = []  # handler.timeout_s after the call started
    stop = threading.Event()
    watcher = loading_watch(srv.port, loading, stop)
    restarter = restart_when(srv, _started_file(hang_dir, head), timeout_at,
                             LOADING_TIMEOUT_S)
    second = None
    try:
        first = run_in_process(spark, job_args(
            srv.url, tmp_path / "r", [STREAM], *LOADING_OPTS,
            f"redis.socket_timeout_s={FAST_S}", f"redis.connect_timeout_s={FAST_S}"))
        restarter.join(30)
        stop.set()
        client = srv.client()
        evalsha = client.info("commandstats").get("cmdstat_evalsha", {})
        pel = pel_of(client)
        beating = file_beating(hang_dir, head)
        if beating:  # the renewal got through once the load ended: run 2 past it
            second = second_run_past(spark, client, srv.url, tmp_path / "r", hang_dir, head,
                                     [], beats(hang_dir, head), "the load", LOADING_OPTS)
    finally:
        stop.set()
        (hang_dir / "release").write_text("1")
    watcher.join(5)
    done = recorded(client, DONE, ["k0"])["k0"]
    assert timeout_at and loading and loading[0] < timeout_at[0] < loading[-1], (
        f"the load did not span the timeout: {timeout_at}, {loading[:1]}-{loading[-1:]}")
    assert int(evalsha.get("rejected_calls", 0)) > 0, f"no EVALSHA met LOADING: {evalsha}"
    assert not client.exists(dead_letter_key(STREAM, ":dlq"))
    if second is not None:  # the first renewal succeeded within redis-py's retries
        assert first.code == 0, first.stderr[-3000:]
        still_running, seen, pel_after = second
        assert still_running, "run 1's call on H ended before run 2 did: no fault to test"
        assert pel[head][1] < LOADING_MIN_IDLE_MS and seen == [head] and \
            pel_after[head][0] == pel[head][0], (
                f"LOADING at the first renewal ({evalsha}): H's PEL row after run 1 "
                f"{pel[head]}; run 2 handed over {seen} while run 1's call ran; PEL after "
                f"run 2: {pel_after}")
        return
    if first.code == 1:
        assert len(first.error_lines()) == 1, first.error_lines()
        assert (list(pel), done) == ([head], [])
        return
    assert first.code == 0, first.stderr[-3000:]
    assert (done, pel) == ([head], {}), (done, pel)
