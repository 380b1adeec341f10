"""A TCP proxy in front of a real Redis that passes requests on at once and answers one byte
(or `chunk` bytes) at a time (Redis behind a sick proxy, ATTACKS.md "Dependencies that
misbehave"): in this process, on threads of its own, on a free port. With
`drip_connections`, only that many connections drip (a retry on a new one is served at
once). With `after`, a
connection's replies drip only once a request holding those bytes passed (``b"XAUTOCLAIM"``:
the executors' claims, not the driver's reads); before that they pass at once. It counts the
bytes it dripped and the replies a client gave up on halfway (`cut`), so a test can prove
the drip happened and that the client ended it, not the reply's end."""

from __future__ import annotations

import socket
import threading
import time
from dataclasses import dataclass, field

from tests.support.dripping import Listener


@dataclass
class DrippingRedis(Listener):
    upstream_port: int
    interval_s: float = 0.5
    chunk: int = 1  # bytes per interval_s
    after: bytes = b""  # replies drip once a request holding this passed; b"": from the start
    drip_connections: int | None = None  # only the first this many connections to send it drip
    dripped: int = 0
    cut: int = 0  # replies whose client closed the connection before their last byte
    dripping_connections: int = 0
    _sock: socket.socket = field(default_factory=socket.socket)
    _stop: threading.Event = field(default_factory=threading.Event)
    thread_name = "dripping-redis"

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def accepted(self, conn: socket.socket) -> None:
        upstream = socket.create_connection(("127.0.0.1", self.upstream_port))
        dripping = threading.Event()
        threading.Thread(target=self._forward, args=(conn, upstream, dripping),
                         daemon=True).start()
        threading.Thread(target=self._reply, args=(upstream, conn, dripping),
                         daemon=True).start()

    def _forward(self, source: socket.socket, sink: socket.socket,
                 dripping: threading.Event) -> None:
        """Requests, at once."""
        try:
            while data := source.recv(1 << 16):
                if self.after in data and not dripping.is_set() and self._may_drip():
                    dripping.set()  # before the request goes on: its reply drips
                sink.sendall(data)
        except OSError:
            pass
        finally:
            sink.close()

    def _may_drip(self) -> bool:
        """Whether one more connection may drip (`drip_connections`), counting it."""
        if self.drip_connections is not None and (
                self.dripping_connections >= self.drip_connections):
            return False
        self.dripping_connections += 1
        return True

    def _reply(self, source: socket.socket, sink: socket.socket,
               dripping: threading.Event) -> None:
        """Replies: at once until `dripping` is set, then `chunk` bytes per `interval_s`."""
        try:
            while not self._stop.is_set() and (data := source.recv(1 << 16)):
                if not dripping.is_set():
                    sink.sendall(data)
                elif not self._late(data, sink):
                    return
        except OSError:
            pass
        finally:
            sink.close()

    def _late(self, data: bytes, sink: socket.socket) -> bool:
        """A reply once its connection misbehaves: dripped (:meth:`_drip`)."""
        return self._drip(data, sink)

    def _drip(self, data: bytes, sink: socket.socket) -> bool:
        """`data` to `sink`, a chunk per interval; False once the proxy stops."""
        for at in range(0, len(data), self.chunk):
            piece = data[at : at + self.chunk]
            try:
                sink.sendall(piece)
            except OSError:
                self.cut += 1
                raise
            self.dripped += len(piece)
            if self._stop.wait(self.interval_s):
                return False
        return True


def cut_seen(drip: DrippingRedis, at_least: int) -> int:
    """The proxy's count of replies given up halfway, once it reaches `at_least` (the proxy
    sees a closed client at its next write: within two intervals on a quiet machine; up to
    10 s are waited, for a loaded one: a client that never closed lets the proxy finish the
    reply, so the count stays short)."""
    deadline = time.monotonic() + 10 + 2 * drip.interval_s
    while drip.cut < at_least and time.monotonic() < deadline:
        time.sleep(0.02)
    return drip.cut
