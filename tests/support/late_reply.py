"""A TCP proxy in front of a real server that holds back replies: the replies to the first
`times` requests holding every one of `markers` (e.g. ``EVALSHA`` and a script's SHA1)
reach the client `delay_s` seconds after the server sent them. The server has run the
command on time; only its answer is late, as behind a stalled link or a proxy, or when the
server blocks (a fork, another client's slow command) between running a command and writing
its reply."""

from __future__ import annotations

import socket
import threading
import time
from dataclasses import dataclass

from tests.support.proxy import ForwardingProxy


@dataclass
class LateReply(ForwardingProxy):
    """Forwards 127.0.0.1:`port` to the server at `target_port`; the replies to the first
    `times` requests with every one of `markers` wait `delay_s` first. `delayed` counts the
    replies held."""

    markers: tuple[bytes, ...] = ()
    delay_s: float = 0.0
    times: int = 1
    delayed: int = 0
    _armed: int | None = None  # the pump thread whose next reply waits

    def forward(self, request: bytes, upstream: socket.socket) -> bool:
        with self._lock:
            if self.delayed < self.times and self._armed is None \
                    and all(m in request for m in self.markers):
                self._armed = threading.get_ident()
        return super().forward(request, upstream)

    def reply(self, data: bytes) -> bytes:
        if self._armed == threading.get_ident():
            time.sleep(self.delay_s)
            with self._lock:
                self._armed, self.delayed = None, self.delayed + 1
        return data
