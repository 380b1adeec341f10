"""A TCP proxy in front of a real Redis that passes requests on at once and answers one byte
at a time (Redis behind a sick proxy, ATTACKS.md "Dependencies that misbehave"): in this
process, on threads of its own, on a free port. It counts the bytes it dripped, so a test can
prove the drip happened."""

from __future__ import annotations

import socket
import threading
from dataclasses import dataclass, field

from tests.support.dripping import Listener


@dataclass
class DrippingRedis(Listener):
    upstream_port: int
    interval_s: float = 0.5
    dripped: int = 0
    _sock: socket.socket = field(default_factory=socket.socket)
    _stop: threading.Event = field(default_factory=threading.Event)
    thread_name = "dripping-redis"

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def accepted(self, conn: socket.socket) -> None:
        upstream = socket.create_connection(("127.0.0.1", self.upstream_port))
        threading.Thread(target=self._forward, args=(conn, upstream), daemon=True).start()
        threading.Thread(target=self._drip, args=(upstream, conn), daemon=True).start()

    def _forward(self, source: socket.socket, sink: socket.socket) -> None:
        """Requests, at once."""
        try:
            while data := source.recv(1 << 16):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            sink.close()

    def _drip(self, source: socket.socket, sink: socket.socket) -> None:
        """Replies, one byte per `interval_s`."""
        try:
            while not self._stop.is_set() and (data := source.recv(1 << 16)):
                for byte in data:
                    sink.sendall(bytes([byte]))
                    self.dripped += 1
                    if self._stop.wait(self.interval_s):
                        return
        except OSError:
            pass
        finally:
            sink.close()
