"""Counts over a whole dead-letter stream, by source, group, reason and error signature, from
a scan in the background: pages of XRANGE (bounded by count and by bytes,
:func:`recovery.redis_io.letters.bounded_page`) with a pause between them, so Redis and the pages
are never held up. A page shows the counts with how fresh they are (started, finished, or how
far along), never waits for them."""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import redis

from recovery.console.letters import Letter
from recovery.redis_io.letters import bounded_page

log = logging.getLogger(__name__)
SCAN_PAGE = 200  # letters per read of a scan (one script call: a few ms of the server)
PAUSE_S = 0.002  # between two pages: other clients' commands run in between
AT_ONCE = 2  # scans that read at the same time (hundreds of streams: the others wait)


@dataclass
class LetterCounts:
    """A scan of one dead-letter stream: `scanned` letters of about `length` (its XLEN when
    it started), the counts so far, `started_s` / `finished_s` (epoch s; None while running)
    and `error` when it stopped on one."""

    key: str
    length: int
    started_s: float = field(default_factory=time.time)
    scanned: int = 0
    finished_s: float | None = None
    error: str | None = None
    by_cause: Counter[tuple[str, str, str]] = field(default_factory=Counter)
    by_signature: Counter[str] = field(default_factory=Counter)

    @property
    def progress(self) -> float:
        """Fraction scanned (1.0 once finished)."""
        if self.finished_s is not None:
            return 1.0
        return min(1.0, self.scanned / self.length) if self.length else 0.0

    def add(self, letter: Letter) -> None:
        self.scanned += 1
        self.by_cause[(letter.source or "", letter.group or "", letter.reason or "")] += 1
        self.by_signature[letter.signature or ""] += 1

    def by(self, position: int) -> list[tuple[str, int]]:
        """Counts by source (0), group (1) or reason (2), most first."""
        summed: Counter[str] = Counter()
        for cause, n in self.by_cause.items():
            summed[cause[position]] += n
        return summed.most_common()


class CountScans:
    """One background scan per dead-letter stream at a time; `connect` opens the scan's own
    client (closed when it ends)."""

    def __init__(self, connect: Callable[[], redis.Redis]) -> None:
        self._connect = connect
        self._lock = threading.Lock()
        self._scans: dict[str, LetterCounts] = {}
        self._readers = threading.Semaphore(AT_ONCE)

    def latest(self, key: str) -> LetterCounts | None:
        with self._lock:
            return self._scans.get(key)

    def start(self, key: str, length: int) -> LetterCounts:
        """Start a scan of `key` unless one is running; returns the one that runs."""
        with self._lock:
            running = self._scans.get(key)
            if running is not None and running.finished_s is None:
                return running
            scan = self._scans[key] = LetterCounts(key, length)
        threading.Thread(target=self._run, args=(scan,), daemon=True,
                         name=f"console-count-{key}").start()
        return scan

    def _run(self, scan: LetterCounts) -> None:
        with self._readers:
            scan.started_s = time.time()
            self._scan(scan)

    def _scan(self, scan: LetterCounts) -> None:
        try:
            client = self._connect()
            try:
                low, more = "-", True
                while more:
                    entries, more = bounded_page(client, scan.key, low, "+", SCAN_PAGE, False)
                    for entry_id, flat in entries:
                        scan.add(Letter.of(entry_id, flat))
                        low = f"({entry_id}"
                    time.sleep(PAUSE_S)
            finally:
                client.close()
        except Exception as exc:  # a scan is advisory: its error is shown on the page
            log.warning("count scan of %s stopped: %s", scan.key, exc)
            scan.error = f"{type(exc).__name__}: {exc}"
        scan.finished_s = time.time()
