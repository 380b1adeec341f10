"""A TCP proxy on a free port of 127.0.0.1 in front of a real server, in this process: each
client connection gets a connection of its own to the server and a daemon thread that
passes bytes both ways until either side closes. What a proxy does besides is its
subclass's: :meth:`ForwardingProxy.forward` sees each request (``acting_proxy``: act at one
moment; ``lost_reply``: lose one reply) and :meth:`ForwardingProxy.reply` each reply."""

from __future__ import annotations

import select
import socket
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field

from redis import Redis


@dataclass
class ForwardingProxy:
    """Forwards 127.0.0.1:`port` to the server at `target_port`, from its construction on
    until :meth:`close`."""

    target_port: int
    _listener: socket.socket = field(default_factory=socket.socket, kw_only=True)
    _lock: threading.Lock = field(default_factory=threading.Lock, kw_only=True)

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

    def forward(self, request: bytes, upstream: socket.socket) -> bool:
        """Send one read of a client's `request` bytes on to the server (the tests' requests
        are small: one read each); False ends the connection, both sides closed."""
        upstream.sendall(request)
        return True

    def reply(self, data: bytes) -> bytes:
        """What the client gets of the server's reply bytes `data`: all of them."""
        return data

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
                    if not data or not self.forward(data, upstream):
                        return
                if upstream in ready:
                    data = upstream.recv(65536)
                    if not data:
                        return
                    downstream.sendall(self.reply(data))
        finally:
            downstream.close()
            upstream.close()


def run_on(port: int, commands: Sequence[Sequence[object]]) -> None:
    """Run `commands` (each a Redis command as a sequence) on the server at `port`, over a
    connection of its own: what a proxy does at its moment besides forwarding."""
    if not commands:
        return
    side = Redis(port=port, socket_timeout=5)
    try:
        for command in commands:
            side.execute_command(*command)
    finally:
        side.close()
