"""Attack handler (tests/integration/attacks/test_attack_lease.py), imported on executors as
``tests.support.lease_handlers:slow_second_call``. Steered by the control file of
``tests.support.fault_tools.write_control`` (``url``, ``stream``, ``group``, ``first_s``,
``until_s``, ``waiting_call``).

Each call records its messages' IDs on ``CALLS`` (one element per call, IDs joined by a
space) before it works. The calls before call number ``waiting_call`` (default 2) take
``first_s`` seconds each; that one and every later one works until a consumer that is not
the job's owns one of the IDs recorded so far (a live consumer took them while the handler
still works on them: the test's consumer claims only then) or until ``until_s`` seconds
have passed. Every message succeeds."""

from __future__ import annotations

import time
from typing import Any

import redis

from recovery.handlers import Message, Result
from tests.support.handlers import _client, _control

CALLS = "test:lease:calls"  # list: per call, its IDs joined by a space, in call order
POLL_S = 0.002


def slow_second_call(messages: list[Message]) -> list[Result]:
    control = _control()
    client = _client(control["url"])
    calls = client.rpush(CALLS, " ".join(m.id for m in messages))
    started = time.monotonic()
    if calls < control.get("waiting_call", 2):
        time.sleep(control["first_s"])
    else:
        while time.monotonic() - started < control["until_s"] and not _taken(client, control):
            time.sleep(POLL_S)
    return [Result.success()] * len(messages)


def _taken(client: redis.Redis, control: dict[str, Any]) -> bool:
    """Whether a consumer that is not the job's owns an entry handed over so far."""
    handed = {i for call in client.lrange(CALLS, 0, -1) for i in call.decode().split()}
    rows = client.xpending_range(control["stream"], control["group"], "-", "+", 1000)
    return any(r["message_id"].decode() in handed
               and not r["consumer"].decode().startswith("recovery-") for r in rows)


HANDED = "test:lease:handed"  # set: every ID handed over


def records(messages: list[Message]) -> list[Result]:
    """Adds each message's ID to ``HANDED``; every message succeeds (a fast handler)."""
    _client(_control()["url"]).sadd(HANDED, *(m.id for m in messages))
    return [Result.success()] * len(messages)
