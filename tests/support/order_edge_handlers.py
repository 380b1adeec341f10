"""Attack handlers of tests/integration/attacks/test_attack_order_edges.py (imported on
executors as ``tests.support.order_edge_handlers:<name>``), steered by the control file of
``tests.support.fault_tools.write_control``. Both record as
``tests.support.order_handler:in_order`` does (``SEEN`` / ``DONE`` + key, ``VIOLATIONS``).

- ``hangs_once``: the first call holding an ID of the set ``HANG`` (of a stream other than
  ``busy``) does not return within ``handler.timeout_s``: it records the ID on ``SEEN``,
  then waits until the key ``RELEASE`` is set (beating ``BEAT`` + ID every 20 ms
  meanwhile, so a test can see the abandoned
  thread is alive), then records its success on ``DONE`` (its side effect, done late) and
  sets ``FINISHED`` + ID. Every later call is ``in_order``, after a sleep of the control's
  ``busy_delay_s`` for a call on the stream ``busy`` (a run kept busy meanwhile).
- ``stops_redis``: ``in_order`` (its successes recorded), then, on the first call holding an
  ID of the control's ``stop_ids``, SIGSTOPs the Redis server (control ``redis_pid``), or
  with ``how`` ``pause`` sends CLIENT PAUSE ``pause_ms`` WRITE, before the call returns,
  i.e. after the handler's success and before the job can ack it, and writes the file
  ``stop_marker`` (O_EXCL: once; it says ``stopped`` or ``paused OK``). Before each call it
  records on ``EARLY`` every message handed over while an older entry of its key (control
  ``order_ids``: key -> IDs in order) is still pending in the group, and on ``ATTEMPTS``
  each message's ID with its Spark task attempt.
"""

from __future__ import annotations

import os
import signal
import time

from recovery.handlers import Message, Result
from tests.support.handlers import _client, _control
from tests.support.order_handler import DONE, SEEN, in_order, key_of

HANG = "test:edge:hang"
HANG_STARTED = "test:edge:hang-started:"
RELEASE = "test:edge:release"
BEAT = "test:edge:beat:"
FINISHED = "test:edge:finished:"
EARLY = "test:edge:early"
ATTEMPTS = "test:edge:attempts"  # "<id> <task attempt>" per message handed over, in order
BUSY_STREAM = "busy"  # hangs_once sleeps the control's busy_delay_s on its messages first
HANG_LIMIT_S = 120.0  # the longest a hung call waits for RELEASE (a test that forgot it)


def hangs_once(messages: list[Message]) -> list[Result]:
    control = _control()
    client = _client(control["url"])
    if any(m.stream == BUSY_STREAM for m in messages):  # keeps a run busy, within the timeout
        time.sleep(control.get("busy_delay_s", 0))
    hang = {v.decode() for v in client.smembers(HANG)}
    # Never a message of BUSY_STREAM: its IDs may equal those of HANG (two streams seeded in
    # one millisecond; seen on a fast machine: busy's head hung instead of H).
    first = [m for m in messages if m.stream != BUSY_STREAM and m.id in hang
             and client.set(HANG_STARTED + m.id, 1, nx=True)]
    if not first:
        return in_order(messages)
    for m in messages:
        client.rpush(SEEN + key_of(m), m.id)
    beats = [BEAT + m.id for m in first]
    deadline = time.monotonic() + HANG_LIMIT_S
    while not client.exists(RELEASE) and time.monotonic() < deadline:
        for beat in beats:
            client.incr(beat)
        time.sleep(0.02)
    for m in messages:  # the dependency answered at last: the side effect is done
        client.rpush(DONE + key_of(m), m.id)
    for m in first:
        client.set(FINISHED + m.id, 1)
    return [Result.success()] * len(messages)


def stops_redis(messages: list[Message]) -> list[Result]:
    control = _control()
    client = _client(control["url"])
    order_ids: dict[str, list[str]] = control.get("order_ids", {})
    for m in messages:
        ids = order_ids.get(key_of(m), [])
        older = ids[: ids.index(m.id)] if m.id in ids else []
        for entry_id in older:
            if client.xpending_range("orders", "g", entry_id, entry_id, 1):
                client.rpush(EARLY, f"{m.id} handed over while {entry_id} still pending")
    from pyspark import TaskContext

    ctx = TaskContext.get()
    for m in messages:
        client.rpush(ATTEMPTS, f"{m.id} {ctx.attemptNumber() if ctx else -1}")
    results = in_order(messages)
    if any(m.id in control.get("stop_ids", []) for m in messages):
        try:
            fd = os.open(control["stop_marker"], os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            return results
        if control.get("how") == "pause":  # writes paused, reads served (the reply noted)
            reply = client.execute_command("CLIENT", "PAUSE", int(control["pause_ms"]),
                                           "WRITE")
            os.write(fd, b"paused " + (b"OK" if reply in (True, b"OK") else repr(reply).encode()))
        else:
            os.kill(int(control["redis_pid"]), signal.SIGSTOP)
            os.write(fd, b"stopped")
        os.close(fd)
    return results
