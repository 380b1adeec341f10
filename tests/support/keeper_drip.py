"""A TCP proxy in front of a real Redis that misbehaves only on the keeper's connections
(``recovery.executor.handover.abandoned``), for tests/integration/attacks/
test_attack_keeper_drip.py: connections accepted once `armed()` is true (e.g. once the
hung call started: the task's and the driver's connections were opened before) are
watched; each request passes on at once.

- ``mode="lease"``: once a watched connection sent the keeper's renewal (an EVALSHA of
  ``lease_owned`` with fresh_ms 0: :func:`keeper_renewal`), its replies drip `chunk` bytes
  per `interval_s`, from then on; with `skip_s`, renewals sent within `skip_s` of the
  first one pass untouched (the first renewal, in the task, with its SCRIPT LOAD and
  EVALSHA again after a NOSCRIPT, is served; the thread's, a third of min_idle_ms later,
  drip).
- ``mode="silent"``: a watched connection gets no reply at all (a Redis that accepts the
  connection and never answers the handshake).
- ``mode="watch"``: everything passes; only counted.

`drip_connections` limits how many connections misbehave (a retry on the next one is
served). It counts what it did (connections, bytes dripped, replies held back, replies a
client gave up on halfway) and the SCRIPT LOADs the watched connections sent, so a test
proves the fault happened.
"""

from __future__ import annotations

import hashlib
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from recovery.redis_io.scripts import LUA
from recovery.testing.local_redis import LocalServer
from tests.support.fault_tools import wait_until, write_control
from tests.support.hung_calls import MIN_IDLE_MS, pel_of
from tests.support.order_tools import STREAM, seed
from tests.support.redis_drip import DrippingRedis

SCRIPT_LOAD = b"SCRIPT\r\n$4\r\nLOAD"  # a SCRIPT LOAD request (after NOSCRIPT)
LEASE_SHA = hashlib.sha1(LUA.joinpath("lease_owned.lua").read_bytes()).hexdigest().encode()


def keeper_renewal(request: bytes) -> bool:
    """Whether `request` starts with the keeper's renewal: ``EVALSHA <lease_owned> 1 <stream>
    <group> <consumer> 0 ...`` (fresh_ms 0, sent alone; the hand-over's own lease reads pass
    a fresh time above 0, or travel in pipelines behind other commands)."""
    bulks = request.split(b"\r\n")[2::2]
    return len(bulks) > 6 and bulks[0].upper() == b"EVALSHA" and bulks[1] == LEASE_SHA \
        and bulks[6] == b"0"


@dataclass
class KeeperDrip(DrippingRedis):
    armed: Callable[[], bool] = lambda: True  # whether a new connection is watched
    mode: str = "lease"  # "lease" or "silent"
    interval_s: float = 1.0
    skip_s: float | None = None
    first_renewal_at: float | None = None
    watched: int = 0  # connections accepted while armed
    renewals: int = 0  # keeper renewals seen on watched connections
    loads: int = 0  # SCRIPT LOADs seen on watched connections
    held: int = 0  # reply bytes never passed on (silent)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    thread_name = "keeper-drip"

    @property
    def faulty(self) -> int:
        """Connections that misbehaved (DrippingRedis' count)."""
        return self.dripping_connections

    def accepted(self, conn: socket.socket) -> None:
        upstream = socket.create_connection(("127.0.0.1", self.upstream_port))
        watched = self.armed()
        bad = threading.Event()
        if watched:
            with self._lock:
                self.watched += 1
                if self.mode == "silent" and self._may_drip():
                    bad.set()
        threading.Thread(target=self._forward_watched, args=(conn, upstream, watched, bad),
                         daemon=True).start()
        threading.Thread(target=self._reply, args=(upstream, conn, bad), daemon=True).start()

    def _forward_watched(self, source: socket.socket, sink: socket.socket, watched: bool,
                         bad: threading.Event) -> None:
        """Requests, at once; a watched connection's keeper renewal makes its replies bad."""
        try:
            while data := source.recv(1 << 16):
                if watched and SCRIPT_LOAD in data.upper():
                    self.loads += 1
                if watched and self.mode == "lease" and keeper_renewal(data):
                    with self._lock:
                        self.renewals += 1
                        now = time.monotonic()
                        self.first_renewal_at = self.first_renewal_at or now
                        served = self.skip_s is not None and \
                            now - self.first_renewal_at < self.skip_s
                        if not served and not bad.is_set() and self._may_drip():
                            bad.set()  # before the request goes on: its reply drips
                sink.sendall(data)
        except OSError:
            pass
        finally:
            sink.close()

    def _late(self, data: bytes, sink: socket.socket) -> bool:
        """A watched reply: held back for good (``silent``), else dripped."""
        if self.mode == "silent":
            self.held += len(data)
            return True
        return super()._late(data, sink)


def flush_scripts_once(client, started: Callable[[], bool], flushed: list[int]  # type: ignore[no-untyped-def]
                       ) -> threading.Thread:
    """A started thread that empties Redis' script cache (SCRIPT FLUSH) once `started()`
    (a hung call started: the keeper's first renewal, at its timeout, then meets NOSCRIPT),
    noting the flush on `flushed`."""
    def flush() -> None:
        if wait_until(started, None, 120, "the hung call to start"):
            client.script_flush()
            flushed.append(1)
    thread = threading.Thread(target=flush, daemon=True)
    thread.start()
    return thread


def idle_ms(client, entry_id: str) -> int:  # type: ignore[no-untyped-def]
    """`entry_id`'s idle time in `STREAM`'s group g (ms), -1 when not pending."""
    return pel_of(client).get(entry_id, ("", -1, 0))[1]


def live_consumer_claims(client, head: str, hang_dir: Path, within_s: float  # type: ignore[no-untyped-def]
                         ) -> tuple[list[str], int]:
    """A live consumer "live" claiming `head` with claim.min_idle_ms (XCLAIM JUSTID every
    20 ms) while the file-hung call on `head` runs, for up to `within_s`: what it took (it
    stops at the first), and `head`'s highest idle time seen (ms)."""
    top, end = 0, time.monotonic() + within_s
    while time.monotonic() < end and not (hang_dir / f"finished-{head}").exists():
        top = max(top, idle_ms(client, head))
        taken = client.xclaim(STREAM, "g", "live", MIN_IDLE_MS, [head], justid=True)
        if taken:
            return [t.decode() for t in taken], top
        time.sleep(0.02)
    return [], top


def head_alone(server: LocalServer, tmp_path: Path) -> tuple[Path, str]:
    """H alone pending on `server` (key k0), the handlers steered to it (records straight to
    `server`), H to hang on a file in ``tmp_path/hang``: (that folder, H)."""
    hang_dir = tmp_path / "hang"
    hang_dir.mkdir()
    head = seed(server.client(), keys=1, per_key=1)["k0"][0]
    write_control(server.url, hang_ids=[head], hang_dir=str(hang_dir))
    return hang_dir, head
