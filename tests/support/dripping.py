"""A TCP server that accepts, reads the request and then answers one byte at a time (a
Pushgateway behind a sick proxy, ATTACKS.md "Dependencies that misbehave"): in this process,
on a thread of its own, on a free port. It counts the bytes it sent, so a test can prove the
drip happened, and stops dripping after `give_up_s` (then closes), so a client without a
deadline of its own ends a test instead of hanging it."""

from __future__ import annotations

import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Self

RESPONSE = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"


class Listener:
    """A listening socket on a free port of 127.0.0.1, accepting on a daemon thread of its
    own until closed; each connection goes to :meth:`accepted` (on the accept thread)."""

    _sock: socket.socket
    _stop: threading.Event
    thread_name = "listener"

    def __enter__(self) -> Self:
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(8)
        self._sock.settimeout(0.2)
        threading.Thread(target=self._serve, daemon=True, name=self.thread_name).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._sock.close()

    @property
    def port(self) -> int:
        return int(self._sock.getsockname()[1])

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except OSError:
                continue
            self.accepted(conn)

    def accepted(self, conn: socket.socket) -> None:
        raise NotImplementedError


@dataclass
class DrippingServer(Listener):
    interval_s: float = 1.5
    give_up_s: float = 15.0
    sent: int = 0
    accepted_at: list[float] = field(default_factory=list)  # time.monotonic() per connection
    _sock: socket.socket = field(default_factory=socket.socket)
    _stop: threading.Event = field(default_factory=threading.Event)

    thread_name = "dripping-server"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def accepted(self, conn: socket.socket) -> None:
        self.accepted_at.append(time.monotonic())
        threading.Thread(target=self._drip, args=(conn,), daemon=True).start()

    def _drip(self, conn: socket.socket) -> None:
        with conn:
            conn.settimeout(2)
            try:
                conn.recv(1 << 20)  # the request line, headers and (small) body
            except OSError:
                return
            until = time.monotonic() + self.give_up_s
            for byte in RESPONSE:
                if self._stop.is_set() or time.monotonic() > until:
                    return
                try:
                    conn.sendall(bytes([byte]))
                except OSError:
                    return
                self.sent += 1
                self._stop.wait(self.interval_s)
