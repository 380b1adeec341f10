"""A TCP proxy in front of a real server that loses one reply: the request reaches the
server and runs, its reply is thrown away and the client's connection is closed. This is the
network fault a client retry cannot see through (redis-py then sends the command again).

It can run commands of its own on the server once that reply is thrown away, before the
client sees its connection closed (``after``): what another client does in the gap between
a lost reply and the job's retry (a trim of the stream the reply was about).

It can also rewrite bytes in every reply (same length, so RESP lengths stay right): how a
test shows the job a version string of a server that cannot be started here."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Sequence
from dataclasses import dataclass

from tests.support.proxy import ForwardingProxy, run_on


@dataclass
class ReplyDropper(ForwardingProxy):
    """Forwards 127.0.0.1:`port` to the server at `target_port`; drops the reply to the
    `nth` request (1-based) whose bytes contain `marker`, once. `dropped` counts replies
    really thrown away (the server answered, the client's connection was closed unanswered):
    a test asserting it proves its fault happened. `rewrite` (old, new): replaces `old` by
    `new` (of the same length) in every reply. `after`: Redis commands (each a sequence)
    run on the server over a connection of its own once the reply is thrown away."""

    marker: bytes
    nth: int = 1
    rewrite: tuple[bytes, bytes] | None = None
    after: Sequence[Sequence[object]] = ()
    dropped: int = 0
    _seen: int = 0

    def __post_init__(self) -> None:
        if self.rewrite is not None and len(self.rewrite[0]) != len(self.rewrite[1]):
            raise ValueError("a rewrite must keep the length of what it replaces")
        super().__post_init__()

    def forward(self, request: bytes, upstream: socket.socket) -> bool:
        """Send `request` on; for the one whose reply is dropped, read that reply, throw
        it away and end the connection."""
        upstream.sendall(request)
        if not self._drop_this(request):
            return True
        if _swallow(upstream):
            with self._lock:
                self.dropped += 1
            run_on(self.target_port, self.after)
        return False

    def reply(self, data: bytes) -> bytes:
        return data if self.rewrite is None else data.replace(*self.rewrite)

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

