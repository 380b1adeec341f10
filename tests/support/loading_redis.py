"""A Redis that, restarted, answers LOADING for seconds (a restart on a big AOF), and a
watcher that proves it did, for tests/integration/attacks/test_attack_keeper_drip.py."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import redis

from recovery.testing.local_redis import LocalServer
from tests.support.fault_tools import wait_until
from tests.support.servers import start_server

LOAD_KEYS, LOAD_DELAY_US = 20_000, 100  # an AOF that loads for ~2-3 s (key-load-delay)


def slow_loading_server(keys: int = LOAD_KEYS) -> LocalServer:
    """A started Redis with AOF (every write fsynced) that, restarted, loads for seconds:
    each command of the AOF costs key-load-delay µs, and `keys` fill it; clients get
    LOADING meanwhile (the loader serves events every 1024 commands)."""
    srv = start_server("redis", "--appendonly", "yes", "--appendfsync", "always",
                       "--key-load-delay", str(LOAD_DELAY_US))
    fill = srv.client().pipeline(transaction=False)
    for i in range(keys):
        fill.set(f"fill:{i}", "x")
    fill.execute()
    return srv


def loading_watch(port: int, seen: list[float], stop: threading.Event) -> threading.Thread:
    """A started thread noting each moment (time.monotonic()) INFO persistence says
    loading:1 (INFO is served while loading) until `stop`."""
    def watch() -> None:
        while not stop.is_set():
            try:
                with redis.Redis(port=port, socket_timeout=1) as w:
                    while not stop.is_set():
                        if int(w.info("persistence")["loading"]):
                            seen.append(time.monotonic())
                        time.sleep(0.02)
            except (redis.RedisError, OSError):
                time.sleep(0.02)
    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


def restart_when(srv: LocalServer, started: Path, at: list[float], after_s: float
                 ) -> threading.Thread:
    """A started thread that restarts `srv` (SIGKILL, start on its AOF) once the file
    `started` exists, noting on `at` (``time.monotonic()``'s clock) the moment `after_s` after
    the file was made (a handler timeout counted from the call's start, whenever this thread
    saw the file: on a loaded host, late)."""
    def restart() -> None:
        if wait_until(started.exists, None, 120, "the hung call to start"):
            made_ago_s = time.time() - started.stat().st_mtime
            at.append(time.monotonic() - made_ago_s + after_s)
            srv.restart()
    thread = threading.Thread(target=restart, daemon=True)
    thread.start()
    return thread
