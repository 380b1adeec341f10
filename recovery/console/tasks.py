"""Long actions in the background, with progress a page can show: a redrive of selected
letters, the count of what a filter matches (the preview), and a redrive of what a filter
matches (up to the previewed count, within the ID range the preview walked).

Each task runs in a thread with its own Redis client (each command sent once: a move whose
reply was lost is "unknown", never run again), moves letters one script call at a time
(:mod:`recovery.console.moves`) under a rate cap (``Throttle``), and is recorded in the audit
log when it starts and when it ends.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

import redis

from recovery.console.audit import record
from recovery.console.letters import Letter, LetterFilter
from recovery.console.moves import Moved, no_retries, redrive_by_id, redrive_letter
from recovery.executor.claim.throttle import Throttle
from recovery.redis_io.letters import bounded_page

log = logging.getLogger(__name__)
WALK_CHUNK = 200  # letters per read (one script call: a few ms of the server)
SHOWN_REFUSALS = 20


@dataclass
class Task:
    """One background action: `kind` (``redrive``, ``preview``, ``redrive-filter``), `total`
    letters it expects (None: unknown yet), what became of them so far."""

    task_id: int
    kind: str
    who: str
    key: str
    total: int | None
    started_s: float = field(default_factory=time.time)
    examined: int = 0
    matched: int = 0
    counts: dict[str, int] = field(default_factory=lambda: {m.value: 0 for m in Moved})
    refusals: list[str] = field(default_factory=list)
    high: str | None = None  # a preview: the last ID it walked (the redrive's upper bound)
    finished_s: float | None = None
    error: str | None = None
    flt: LetterFilter = field(default_factory=LetterFilter)

    @property
    def done(self) -> int:
        return sum(self.counts.values()) if self.kind != "preview" else self.examined

    def note(self, outcome: Moved, detail: str) -> None:
        self.counts[outcome.value] += 1
        if outcome in (Moved.REFUSED, Moved.UNKNOWN) and len(self.refusals) < SHOWN_REFUSALS:
            self.refusals.append(detail)


@dataclass(frozen=True)
class Runner:
    """What a task needs: a client factory, the audit stream, the rate cap (letters/s)."""

    connect: Callable[[], redis.Redis]
    audit_key: str
    rate: float | None


class Tasks:
    """The tasks of this console process, by ID (kept until it stops)."""

    def __init__(self, runner: Runner) -> None:
        self.runner = runner
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._tasks: dict[int, Task] = {}

    def get(self, task_id: int) -> Task | None:
        with self._lock:
            return self._tasks.get(task_id)

    def recent(self) -> list[Task]:
        with self._lock:
            return sorted(self._tasks.values(), key=lambda t: -t.task_id)[:50]

    def _new(self, kind: str, who: str, key: str, total: int | None,
             flt: LetterFilter | None = None) -> Task:
        with self._lock:
            task = Task(next(self._ids), kind, who, key, total, flt=flt or LetterFilter())
            self._tasks[task.task_id] = task
        return task

    def redrive_ids(self, who: str, role: str, key: str, ids: Sequence[str],
                    sources: Sequence[str]) -> Task:
        """Start sending the letters `ids` of `key` back, in the order given."""
        task = self._new("redrive", who, key, len(ids))

        def work(client: redis.Redis, throttle: Throttle) -> None:
            for entry_id in ids:
                task.note(*redrive_by_id(client, key, entry_id, sources))
                throttle.take(1)

        # The IDs in the start record: a console killed mid-way records no end, and this is
        # what says which letters to look for (each is in its source or still here, once).
        self._start(task, role, work, f"{len(ids)} selected letters: {' '.join(ids)}")
        return task

    def preview(self, who: str, role: str, key: str, flt: LetterFilter) -> Task:
        """Start counting the letters of `key` that `flt` matches (nothing written)."""
        task = self._new("preview", who, key, None, flt)

        def work(client: redis.Redis, _: Throttle) -> None:
            for letter in walk(client, key, flt, None, task):
                task.matched += 1 if letter is not None else 0

        self._start(task, role, work, _filter_text(flt), audited=False)
        return task

    def redrive_matching(self, who: str, role: str, preview: Task,
                         sources: Sequence[str]) -> Task:
        """Start sending back what `preview`'s filter matches: at most the count it showed,
        among the letters up to the last ID it walked (later letters are not included)."""
        task = self._new("redrive-filter", who, preview.key, preview.matched, preview.flt)

        def work(client: redis.Redis, throttle: Throttle) -> None:
            for letter in walk(client, preview.key, preview.flt, preview.high, task):
                if letter is None:
                    continue
                if task.done >= preview.matched:
                    return
                task.note(*redrive_letter(client, preview.key, letter, sources))
                throttle.take(1)

        self._start(task, role, work, f"filter {_filter_text(preview.flt)}, "
                                      f"previewed {preview.matched} up to {preview.high}")
        return task

    def _start(self, task: Task, role: str, work: Callable[[redis.Redis, Throttle], None],
               detail: str, audited: bool = True) -> None:
        run = self.runner

        def body() -> None:
            try:
                client = no_retries(run.connect())
                try:
                    if audited:
                        record(client, run.audit_key, task.who, role, f"{task.kind}-start",
                               task.key, task.total or 0, detail)
                    work(client, Throttle(run.rate))
                    if audited:
                        record(client, run.audit_key, task.who, role, task.kind, task.key,
                               task.counts[Moved.MOVED.value], _outcome_text(task))
                finally:
                    client.close()
            except Exception as exc:  # shown on the task's page, and in the audit log
                log.warning("console task %d failed: %s", task.task_id, exc)
                task.error = f"{type(exc).__name__}: {exc}"
                if audited:
                    _record_failure(run, task, role)
            task.finished_s = time.time()

        threading.Thread(target=body, daemon=True, name=f"console-task-{task.task_id}").start()


def walk(client: redis.Redis, key: str, flt: LetterFilter, high: str | None, task: Task
         ) -> Iterator[Letter | None]:
    """Every letter of `key` in `flt`'s window (up to `high` when given), oldest first, in
    chunks: the matching ones, and None for each that does not; counts `task.examined` and,
    for a preview, sets `task.high` to the last ID looked at."""
    low, top = flt.bounds()
    top = high or top
    while True:
        entries, more = bounded_page(client, key, low, top, WALK_CHUNK, newest_first=False)
        for entry_id, flat in entries:
            task.examined += 1
            if task.kind == "preview":
                task.high = entry_id
            letter = Letter.of(entry_id, flat)
            yield letter if flt.matches(letter) else None
        if not more:
            return
        low = "(" + entries[-1][0]


def _record_failure(run: Runner, task: Task, role: str) -> None:
    """The audit entry of a task that stopped on an error (what it had moved by then); a
    Redis that is gone cannot take it, which the log says."""
    try:
        client = run.connect()
        try:
            record(client, run.audit_key, task.who, role, f"{task.kind}-failed", task.key,
                   task.counts[Moved.MOVED.value], f"{_outcome_text(task)}; {task.error}")
        finally:
            client.close()
    except Exception as exc:
        log.warning("console task %d: its failure is not in the audit log: %s",
                    task.task_id, exc)


def _filter_text(flt: LetterFilter) -> str:
    return " ".join(f"{k}={v}" for k, v in flt.query().items()) or "all letters"


def _outcome_text(task: Task) -> str:
    return ", ".join(f"{n} {k}" for k, n in task.counts.items()) + \
        (f"; first refusal: {task.refusals[0]}" if task.refusals else "")
