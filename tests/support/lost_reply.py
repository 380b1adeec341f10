"""A TCP proxy in front of a real server that loses one reply: the request reaches the
server and runs, its reply is thrown away and the client's connection is closed. This is the
network fault a client retry cannot see through (redis-py then sends the command again).

It can also rewrite bytes in every reply (same length, so RESP lengths stay right): how a
test shows the job a version string of a server that cannot be started here."""

from __future__ import annotations

import contextlib
import select
import socket
import threading
from dataclasses import dataclass, field


@dataclass
class ReplyDropper:
    """Forwards 127.0.0.1:`port` to the server at `target_port`; drops the reply to the
    `nth` request (1-based) whose bytes contain `marker`, once. `dropped` counts replies
    really thrown away (the server answered, the client's connection was closed unanswered):
    a test asserting it proves its fault happened. `rewrite` (old, new): replaces `old` by
    `new` (of the same length) in every reply."""

    target_port: int
    marker: bytes
    nth: int = 1
    rewrite: tuple[bytes, bytes] | None = None
    dropped: int = 0
    _seen: int = 0
    _listener: socket.socket = field(default_factory=socket.socket)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        if self.rewrite is not None and len(self.rewrite[0]) != len(self.rewrite[1]):
            raise ValueError("a rewrite must keep the length of what it replaces")
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
                    upstream.sendall(data)
                    if self._drop_this(data):
                        if _swallow(upstream):
                            with self._lock:
                                self.dropped += 1
                        return
                if upstream in ready:
                    data = upstream.recv(65536)
                    if not data:
                        return
                    if self.rewrite is not None:
                        data = data.replace(*self.rewrite)
                    downstream.sendall(data)
        finally:
            downstream.close()
            upstream.close()

    def _drop_this(self, request: bytes) -> bool:
        with self._lock:
            if self.marker not in request:
                return False
            self._seen += 1
            return self._seen == self.nth


def _swallow(upstream: socket.socket) -> bool:
    """Read the server's reply (so the command surely ran) and throw it away. False if none
    came within 2 s."""
    upstream.settimeout(2.0)
    with contextlib.suppress(OSError):
        return bool(upstream.recv(65536))
    return False
