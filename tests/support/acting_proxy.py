"""A TCP proxy in front of a real server that acts at one exact moment of a run: the first
time a client's request holds every one of `markers` (e.g. a script's SHA1 and a stream
name), it first runs `commands` on the server over a connection of its own, then forwards
that request. So a test can make a stream's group vanish between two commands of the job
(after the claim, just before the requeue script), which no handler can reach."""

from __future__ import annotations

import socket
from collections.abc import Sequence
from dataclasses import dataclass

from tests.support.proxy import ForwardingProxy, run_on


@dataclass
class ActingProxy(ForwardingProxy):
    """Forwards 127.0.0.1:`port` to the server at `target_port`; runs `commands` (each a
    Redis command as a sequence) once, before the first request with all `markers`.
    `acted` counts how often it acted (0 or 1)."""

    markers: Sequence[bytes]
    commands: Sequence[Sequence[object]]
    acted: int = 0

    def forward(self, request: bytes, upstream: socket.socket) -> bool:
        self._maybe_act(request)
        return super().forward(request, upstream)

    def _maybe_act(self, request: bytes) -> None:
        with self._lock:
            if self.acted or not all(m in request for m in self.markers):
                return
            run_on(self.target_port, self.commands)
            self.acted += 1
