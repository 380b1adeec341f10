"""Helpers of the attacks on handler calls abandoned at ``handler.timeout_s`` and the lease
kept for them (tests/integration/attacks/test_attack_order_edges.py,
test_attack_keeper.py, test_attack_keeper_edges.py, test_attack_keeper_retries.py): the
job's options, a key hung at its head, whether a hung call still runs, waits on idle times
and beats, and the second run past a fault."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest
from redis import Redis

from recovery.testing.local_redis import LocalServer
from tests.support import fault_tools
from tests.support.fault_tools import GROUP, run_in_process, wait_until, write_control
from tests.support.keeper_handlers import beats
from tests.support.order_edge_handlers import BEAT, FINISHED, HANG, RELEASE
from tests.support.order_handler import DONE, SEEN
from tests.support.order_tools import STREAM, args, recorded, rows_of, seed

HANGS_ONCE = "handler.path=tests.support.order_edge_handlers:hangs_once"


def key_hung_at_head(server: LocalServer) -> tuple[Redis, str, list[str]]:
    """k0 (H, E2, E3) seeded on `server`, the handlers steered to it, H to hang once:
    (a client, H, [E2, E3])."""
    client = server.client()
    write_control(server.url)
    ids = seed(client, keys=1, per_key=3)["k0"]
    client.sadd(HANG, ids[0])
    return client, ids[0], ids[1:]


def beating(client, entry_id: str) -> bool:
    """Whether the abandoned call of `entry_id` is alive now: its beat counter moves."""
    before = int(client.get(BEAT + entry_id) or 0)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        time.sleep(0.05)
        if int(client.get(BEAT + entry_id) or 0) != before:
            return True
    return False


def wait_idle(client, ids: list[str], idle_ms: int) -> None:
    """Wait until every entry of `ids` has been idle `idle_ms` (what a later run waits for)."""
    def idle() -> bool:
        rows = client.xpending_range(STREAM, "g", "-", "+", 1000)
        got = {r["message_id"].decode(): r["time_since_delivered"] for r in rows}
        return all(got.get(i, 0) >= idle_ms for i in ids)
    wait_until(idle, None, 30, f"{ids} idle {idle_ms} ms")


def call_still_running(client, entry_id: str) -> bool:
    """Whether the abandoned call of `entry_id` is alive and has not finished."""
    return beating(client, entry_id) and not client.exists(FINISHED + entry_id)


def release(client, entry_id: str) -> None:
    """Let the abandoned call of `entry_id` finish, and wait until it has."""
    client.set(RELEASE, 1)
    wait_until(lambda: bool(client.exists(FINISHED + entry_id)), None, 30,
               "the abandoned call to finish once released")


def abandoned_past_min_idle(client, entry_id: str) -> None:
    """Wait until the call on `entry_id` has run 3 s (150 beats of at least 20 ms): past its
    1 s timeout and then claim.min_idle_ms (1.5 s), when an entry nobody renews is idle."""
    wait_until(lambda: int(client.get(BEAT + entry_id) or 0) >= 150, None, 60,
               f"the call on {entry_id} to run 3 s")


def replays_only_after_themselves(done: list[str]) -> bool:
    """Successes in ID order, a repeat only right after the same ID (at-least-once)."""
    firsts = [i for n, i in enumerate(done) if n == 0 or done[n - 1] != i]
    key = [tuple(int(p) for p in i.split("-")) for i in firsts]
    return key == sorted(set(key)) and len(key) == len(set(key))


def proc_state(pid: int) -> str:
    """The process state letter of `pid` (``T``: stopped)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat[stat.rindex(")") + 2]


FILE_HANG = "handler.path=tests.support.keeper_handlers:hangs_on_file"


OPTS = ("spark.partitions=1", "handler.batch_size=1", "handler.timeout_s=1",
        "claim.min_idle_ms=1500")


MIN_IDLE_MS = 1500


def file_beating(hang_dir: Path, entry_id: str) -> bool:
    """Whether the file-hung call on `entry_id` is alive now: its beat file moves."""
    before = beats(hang_dir, entry_id)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        time.sleep(0.05)
        if beats(hang_dir, entry_id) != before:
            return True
    return False


def key_hung_on_file(server: LocalServer, tmp_path: Path
                      ) -> tuple[Redis, Path, str, list[str]]:
    """k0 (H, E2, E3) seeded on `server`, the handlers steered to it, H to hang on a file in
    ``tmp_path/hang`` (``hangs_on_file``): (a client, that folder, H, [E2, E3])."""
    client = server.client()
    hang_dir = tmp_path / "hang"
    hang_dir.mkdir()
    ids = seed(client, keys=1, per_key=3)["k0"]
    write_control(server.url, hang_ids=[ids[0]], hang_dir=str(hang_dir))
    return client, hang_dir, ids[0], ids[1:]


NOX = ["--set", "redis.username=nox", "--set", "redis.password=nox-pw"]  # the job as nox


def user_without_xclaim(client) -> None:  # type: ignore[no-untyped-def]
    """The ACL user nox (password nox-pw): every command but XCLAIM; the ACL LOG emptied."""
    client.execute_command("ACL", "SETUSER", "nox", "on", ">nox-pw", "~*", "&*", "+@all",
                           "-xclaim")
    client.execute_command("ACL", "LOG", "RESET")


def second_run_past(spark, client, url: str, reports: Path, hang_dir: Path, head: str,  # type: ignore[no-untyped-def]
                     later: list[str], beat: int, what: str,
                     opts: tuple[str, ...] = (*OPTS, FILE_HANG)
                     ) -> tuple[bool, list[str], dict]:
    """Once `later` have been idle claim.min_idle_ms and the hung call on `head` has run 3 s
    (150 beats) past `beat` (`what`: the fault), run 2 with `opts` (exit 0): whether the
    call still runs, what the handler was handed of k0 in all, and the PEL."""
    wait_idle(client, later, MIN_IDLE_MS)
    wait_until(lambda: beats(hang_dir, head) >= beat + 150, None, 60,
               f"the hung call to run 3 s past {what}")
    second = run_in_process(spark, args(url, reports, *opts))
    assert second.code == 0, second.stderr[-3000:]
    still_running = file_beating(hang_dir, head) and \
        not (hang_dir / f"finished-{head}").exists()
    return still_running, recorded(client, SEEN, ["k0"])["k0"], pel_of(client)


def call_finished(client, hang_dir: Path, head: str) -> list[str]:  # type: ignore[no-untyped-def]
    """Wait until the released call hung on `head` has finished; k0's successes in order."""
    wait_until(lambda: (hang_dir / f"finished-{head}").exists(), None, 30,
               "the abandoned call to finish once released")
    return recorded(client, DONE, ["k0"])["k0"]


def pel_of(client, stream: str = STREAM) -> dict[str, tuple[str, int, int]]:  # type: ignore[no-untyped-def]
    """`stream`'s PEL in group g: ID -> (owner, idle ms, delivery count)."""
    rows = client.xpending_range(stream, GROUP, "-", "+", 100_000)
    return {r["message_id"].decode(): (r["consumer"].decode(), r["time_since_delivered"],
                                       r["times_delivered"]) for r in rows}


def first_run_hangs_on_head(spark, url: str, reports: Path, head: str, later: list[str],
                             *opts: str) -> None:  # type: ignore[no-untyped-def]
    """Run 1: the call on `head` times out (reported failed, may still be running), its
    key's later entries held; exit 0."""
    first = run_in_process(spark, args(url, reports, *OPTS, *opts))
    assert first.code == 0, first.stderr[-3000:]
    rows = rows_of(spark, reports, first.summary)
    assert rows[head]["action"] == "failed" and "timed out" in (rows[head]["error"] or ""), \
        rows[head]
    assert [rows[i]["action"] for i in later] == ["held"] * len(later)


def use_venv_spark_submit(monkeypatch: pytest.MonkeyPatch) -> None:
    if not fault_tools.SPARK_SUBMIT.exists():  # a worktree without a .venv of its own
        monkeypatch.setattr(fault_tools, "SPARK_SUBMIT",
                            Path(sys.executable).parent / "spark-submit")
