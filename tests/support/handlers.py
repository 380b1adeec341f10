"""Handlers used by the tests (imported on executors as tests.support.handlers:...)."""

from __future__ import annotations

import hashlib
import json
import os
import time

import redis

from recovery.handlers import Message, Result

CHECKSUM = b"x-test-sha256"


def checksum(fields: list[tuple[bytes, bytes]]) -> bytes:
    """sha256 over every (name, value) pair, lengths included: any byte change shows."""
    digest = hashlib.sha256()
    for name, value in fields:
        if name != CHECKSUM:
            digest.update(len(name).to_bytes(4, "big") + name)
            digest.update(len(value).to_bytes(8, "big") + value)
    return digest.hexdigest().encode()


def verify_or_fail(messages: list[Message]) -> list[Result]:
    """Fails messages with a ``fail`` field, and any whose bytes changed on the way; rejects
    (``Result.dead_letter``) those with a ``reject`` field."""
    results = []
    for m in messages:
        if m.field(CHECKSUM) != checksum(m.fields):
            results.append(Result.failure("corrupted: checksum mismatch"))
        elif m.field(b"fail") is not None:
            results.append(Result.failure(f"refused {m.id}"))
        elif m.field(b"reject") is not None:
            results.append(Result.dead_letter(f"rejected {m.id}"))
        else:
            results.append(Result.success())
    return results


def raises(messages: list[Message]) -> list[Result]:
    raise ValueError("boom")


def verdicts(messages: list[Message]) -> list[Result]:
    """Each message as its ``verdict`` field says: ``reject`` -> ``Result.dead_letter`` (with
    the message's ``n`` in the error), ``fail`` -> a failure, anything else a success."""
    results = []
    for m in messages:
        verdict = m.field(b"verdict")
        n = (m.field(b"n") or b"?").decode()
        results.append(Result.dead_letter(f"customer {n} no longer exists") if verdict == b"reject"
                       else Result.failure(f"timeout on {n}") if verdict == b"fail"
                       else Result.success())
    return results


def downstream_down(messages: list[Message]) -> list[Result]:
    """Fails every message as a service that is down would, with the message's own numbers in
    the text (one signature for all); a message with a ``kind`` field of ``bad`` fails with a
    second error."""
    return [Result.failure(f"HTTPError: 400 bad payload '{m.id}'") if m.field(b"kind") == b"bad"
            else Result.failure(f"RuntimeError: downstream API returned 503 for order "
                                f"{(m.field(b'n') or b'?').decode()}") for m in messages]


def garbage(messages: list[Message]) -> object:
    return {"not": "a list"}


NOT_CALLABLE = 42


# --- A recording handler for the fault tests (tests/integration/faults/,
# tests/integration/test_bad_input.py).
# It runs on executors, so it is steered through a JSON control file named by an environment
# variable that the test process sets before Spark starts (tests/support/fault_tools.py).

CONTROL_ENV = "RECOVERY_TEST_HANDLER_FILE"
HANDLED = "test:handled"            # hash: "<stream> <group> <id>" -> times handed over
LIVE_ACKED = "test:live-acked"      # hash: entry a test's live consumer acked -> when (ms)
VIOLATIONS = "test:violations"      # hash: entry handed over after that ack -> ms since it
FIRST_CALL = "test:first-call-done"
FIRST_CALL_ENTRIES = "test:first-call-entries"  # set: the entries of that first call
TAKEN = "test:taken"  # set: IDs a live consumer claimed from the job during the first call
_RECORD = """
for i = 1, #ARGV do
  redis.call('HINCRBY', KEYS[1], ARGV[i], 1)
  local acked_at = redis.call('HGET', KEYS[2], ARGV[i])
  if acked_at then
    local now = redis.call('TIME')
    redis.call('HSET', KEYS[3], ARGV[i], now[1] * 1000 + math.floor(now[2] / 1000) - acked_at)
  end
end
return #ARGV
"""
_CLIENTS: dict[str, redis.Redis] = {}


def entry_key(stream: str, group: str, entry_id: str) -> str:
    """How the recording handler names an entry in HANDLED, LIVE_ACKED and VIOLATIONS."""
    return f"{stream} {group} {entry_id}"


def _control() -> dict:
    path = os.environ.get(CONTROL_ENV)
    if not path or not os.path.exists(path):
        raise RuntimeError(f"recording handler: no control file ({CONTROL_ENV}={path!r})")
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)


def _client(url: str) -> redis.Redis:
    if url not in _CLIENTS:
        _CLIENTS[url] = redis.Redis.from_url(url, socket_timeout=5)
    return _CLIENTS[url]


def recording(messages: list[Message]) -> object:
    """Record each hand-over in Redis (HINCRBY, so a second one shows), then act as told.

    Control keys: ``url`` (where to record), ``delay_s`` (sleep per call), ``hold_s`` (sleep
    per call up to that long, ending early once a new control file no longer has it: a test
    releases the calls in progress), ``on_first_call``
    (Redis commands run once per test, on the first call anywhere, followed by a sleep of
    ``after_first_call_s``), ``take_on_first_call`` (``[consumer, n]``: in that first call,
    XCLAIM for `consumer`, min-idle 0, the call's first `n` entries carrying a ``fail``
    field, as a live consumer's claim would take them from the job; their IDs go to TAKEN),
    and fields that change
    the behaviour of the whole call when a message carries them: ``raise``, ``garbage``,
    ``hang`` (sleeps ``hang_s``). Otherwise it answers like verify_or_fail.
    """
    control = _control()
    client = _client(control["url"])
    keys = [entry_key(m.stream, m.group, m.id) for m in messages]
    client.eval(_RECORD, 3, HANDLED, LIVE_ACKED, VIOLATIONS, *keys)
    first_call = control.get("on_first_call") or control.get("take_on_first_call")
    if first_call and client.set(FIRST_CALL, 1, nx=True):
        client.sadd(FIRST_CALL_ENTRIES, *keys)
        for command in control.get("on_first_call") or []:
            client.execute_command(*command)
        _take(client, messages, control.get("take_on_first_call"))
        time.sleep(control.get("after_first_call_s", 0))
    time.sleep(control.get("delay_s", 0))
    _hold(control.get("hold_s", 0))
    if any(m.field(b"hang") is not None for m in messages):
        time.sleep(control.get("hang_s", 30))
    if any(m.field(b"raise") is not None for m in messages):
        raise ValueError("boom: the handler raised")
    if any(m.field(b"garbage") is not None for m in messages):
        return {"not": "a list"}
    return verify_or_fail(messages)


def _hold(seconds: float) -> None:
    """Sleep up to `seconds`, in steps of 20 ms, until the control file drops ``hold_s``."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and _control().get("hold_s"):
        time.sleep(0.02)


def _take(client: redis.Redis, messages: list[Message], take: list | None) -> None:
    """XCLAIM for ``take[0]`` the first ``take[1]`` of `messages` with a ``fail`` field."""
    if not take:
        return
    consumer, n = take
    failing = [m for m in messages if m.field(b"fail") is not None][:n]
    for m in failing:
        client.xclaim(m.stream, m.group, consumer, 0, [m.id])
    if failing:
        client.sadd(TAKEN, *(m.id for m in failing))


# --- A handler that plays a live consumer acking during the call
# (tests/unit/executor/handover/test_apply.py).
LIVE_ACK_URL_ENV = "RECOVERY_TEST_LIVE_ACK_URL"
SEEN = "test:seen"  # list: IDs handed to `ack_first_meanwhile`, in order


def ack_first_meanwhile(messages: list[Message]) -> list[Result]:
    """Records what it is handed; while it runs, "someone else" acks the first message."""
    client = redis.Redis.from_url(os.environ[LIVE_ACK_URL_ENV])
    client.rpush(SEEN, *(m.id for m in messages))
    first = messages[0]
    client.xack(first.stream, first.group, first.id)
    client.close()
    return [Result.success()] * len(messages)


MEANWHILE_ENV = "RECOVERY_TEST_MEANWHILE"  # "del": delete the stream; "destroy": its group


IDLE_AT_CALL = "test:idle-at-call"  # list: JSON {id, idle_ms, before} per message handed over


def records_idle_at_call(messages: list[Message]) -> list[Result]:
    """Succeeds on every message; records, for each, its idle time (ms) in the PEL at the
    start of the call and this process's ``time.monotonic()`` just before that reading."""
    client = redis.Redis.from_url(os.environ[LIVE_ACK_URL_ENV])
    for m in messages:
        before = time.monotonic()
        [row] = client.xpending_range(m.stream, m.group, m.id, m.id, 1)
        client.rpush(IDLE_AT_CALL, json.dumps(
            {"id": m.id, "idle_ms": row["time_since_delivered"], "before": before}))
    client.close()
    return [Result.success()] * len(messages)


def make_unit_vanish_meanwhile(messages: list[Message]) -> list[Result]:
    """Succeeds on every message; while it runs, the stream (or its group) vanishes."""
    client = redis.Redis.from_url(os.environ[LIVE_ACK_URL_ENV])
    first = messages[0]
    if os.environ[MEANWHILE_ENV] == "del":
        client.delete(first.stream)
    else:
        client.xgroup_destroy(first.stream, first.group)
    client.close()
    return [Result.success()] * len(messages)


class Unparseable(ValueError):
    """Named in ``handler.dead_letter_exceptions`` by the tests: a message no retry mends."""


class Garbled(Unparseable):
    """A subclass of a named class: it means the same."""


def raises_per_message(messages: list[Message]) -> list[Result]:
    """Goes through the batch in order as its ``verdict`` fields say: ``unparseable`` raises
    Unparseable, ``garbled`` Garbled, ``boom`` a plain RuntimeError (the whole call fails),
    ``hang`` sleeps 3 s; ``fail`` is a failure, anything else a success."""
    results = []
    for m in messages:
        verdict = m.field(b"verdict")
        n = (m.field(b"n") or b"?").decode()
        if verdict == b"unparseable":
            raise Unparseable(f"cannot parse message {n}")
        if verdict == b"garbled":
            raise Garbled(f"garbled message {n}")
        if verdict == b"boom":
            raise RuntimeError(f"downstream down at {n}")
        if verdict == b"hang":
            time.sleep(3)
        results.append(Result.failure(f"timeout on {n}") if verdict == b"fail"
                       else Result.success())
    return results
