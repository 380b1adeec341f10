"""What one console process holds: the settings it was started with, its Redis connection, its
users and session key, the background scans and tasks, and which dead-letter streams the
config selects (the only keys the console reads or changes, besides its audit stream).

The dead-letter streams are found as ``jobs/dead_letters.py`` finds them
(:func:`recovery.targets.dead_letter_streams.dead_letter_pairs`), at most every
``PAIRS_TTL_S`` seconds (``streams.match`` SCANs the keyspace); their length and oldest
letter are read live on every page.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

import redis

from recovery.console.counts import CountScans
from recovery.console.sessions import SessionSigner
from recovery.console.tasks import Runner, Tasks
from recovery.console.users import FailedLogins, User
from recovery.params import RedisParams
from recovery.redis_io.redis_conn import RedisConn, connect, where
from recovery.settings.model import Settings
from recovery.targets.dead_letter_streams import (
    DeadLetterStream,
    dead_letter_pairs,
    inspect_streams,
)

PAIRS_TTL_S = 30.0


@dataclass
class ConsoleState:
    """The console's process-wide state; `rate` caps redrives (letters/s, None: no cap)."""

    settings: Settings
    params: RedisParams
    users: dict[str, User]
    audit_key: str
    rate: float | None
    signer: SessionSigner = field(default_factory=SessionSigner)
    logins: FailedLogins = field(default_factory=FailedLogins)
    _pairs: tuple[float, list[tuple[str, str]]] | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self.conn = RedisConn.open(self.params)
        self.scans = CountScans(self.new_client)
        self.tasks = Tasks(Runner(self.new_client, self.audit_key, self.rate))

    def new_client(self) -> redis.Redis:
        """A client of its own (a background scan's or task's)."""
        return connect(self.params)

    @property
    def server(self) -> str:
        """host:port of the server, for pages (never the URL: it may hold a password)."""
        return where(self.params)

    def pairs(self) -> list[tuple[str, str]]:
        """(source, dead-letter stream) of every selected stream, refreshed every
        ``PAIRS_TTL_S`` s."""
        with self._lock:
            if self._pairs is None or time.monotonic() - self._pairs[0] > PAIRS_TTL_S:
                with self.conn.errors():
                    found = dead_letter_pairs(self.conn, self.settings, [])
                # streams.match = "*" selects the audit stream too: it is no source
                self._pairs = (time.monotonic(), [p for p in found if p[0] != self.audit_key])
            return self._pairs[1]

    def streams(self) -> list[DeadLetterStream]:
        """Every dead-letter stream of the selected streams (a shared one once), read now."""
        return inspect_streams(self.conn, self.pairs())

    def sources_of(self, key: str) -> list[str]:
        """The selected streams whose letters `key` holds ([] : not a dead-letter stream of
        the selection, which the console never touches)."""
        return [s for s, k in self.pairs() if k == key]

    def close(self) -> None:
        self.conn.close()
