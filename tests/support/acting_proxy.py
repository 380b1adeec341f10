"""A TCP proxy in front of a real server that acts at one exact moment of a run: the first
time a client's request holds every one of `markers` (e.g. a script's SHA1 and a stream
name), it first runs `commands` on the server over a connection of its own, then forwards
that request. So a test can make a stream's group vanish between two commands of the job
(after the claim, just before the requeue script), which no handler can reach."""

from __future__ import annotations

import select
import socket
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field

from redis import Redis


@dataclass
class ActingProxy:
    """Forwards 127.0.0.1:`port` to the server at `target_port`; runs `commands` (each a
    Redis command as a sequence) once, before the first request with all `markers`.
    `acted` counts how often it acted (0 or 1)."""

    target_port: int
    markers: Sequence[bytes]
    commands: Sequence[Sequence[object]]
    acted: int = 0
    _listener: socket.socket = field(default_factory=socket.socket)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen()
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def port(self) -> int:
        return int(self._listener.getsockname()[1])

    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def close(self) -> None:
        self._listener.close()

    def _accept(self) -> None:
        while True:
            try:
                downstream, _ = self._listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.target_port))
            threading.Thread(target=self._pump, args=(downstream, upstream), daemon=True).start()

    def _pump(self, downstream: socket.socket, upstream: socket.socket) -> None:
        try:
            while True:
                ready, _, _ = select.select([downstream, upstream], [], [])
                if downstream in ready:
                    data = downstream.recv(65536)
                    if not data:
                        return
                    self._maybe_act(data)  # one read: the tests' requests are small
                    upstream.sendall(data)
                if upstream in ready:
                    data = upstream.recv(65536)
                    if not data:
                        return
                    downstream.sendall(data)
        finally:
            downstream.close()
            upstream.close()

    def _maybe_act(self, request: bytes) -> None:
        with self._lock:
            if self.acted or not all(m in request for m in self.markers):
                return
            side = Redis(port=self.target_port, socket_timeout=5)
            try:
                for command in self.commands:
                    side.execute_command(*command)
            finally:
                side.close()
            self.acted += 1
