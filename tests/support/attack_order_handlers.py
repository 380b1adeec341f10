"""Attack handler (tests/integration/attacks/test_attack_order.py):
``tests.support.order_handler:in_order``, but a message whose ID is in ``CRASH`` kills its
Python worker once (os._exit) right after the call's side effects (recorded successes), before
its results come back."""

from __future__ import annotations

import os

from recovery.handlers import Message, Result
from tests.support.handlers import _client, _control
from tests.support.order_handler import FAIL, VIOLATIONS, in_order

CRASH = "test:order:crash"
CRASHED = "test:order:crashed"


def crash_once(messages: list[Message]) -> list[Result]:
    results = in_order(messages)
    client = _client(_control()["url"])
    crash = {v.decode() for v in client.smembers(CRASH)}
    if any(m.id in crash for m in messages) and client.set(CRASHED, 1, nx=True):
        os._exit(1)
    return results


XDEL = "test:order:xdel"  # IDs the handler deletes from the stream (XDEL) on its first call


def deleting(messages: list[Message]) -> list[Result]:
    """``in_order``, but its first call deletes the IDs in ``XDEL`` from ``orders`` first
    (an upstream XDEL while the run holds them)."""
    client = _client(_control()["url"])
    doomed = [v.decode() for v in client.smembers(XDEL)]
    if doomed and client.set(XDEL + ":done", 1, nx=True):
        client.xdel("orders", *doomed)
    return in_order(messages)


BYTES_DONE = "test:order:bytes:done"  # IDs handled with success, in call order


def any_key(messages: list[Message]) -> list[Result]:
    """Keys of any bytes (not UTF-8 too): fails the IDs in ``FAIL``, records the others on
    ``BYTES_DONE``; a call holding two entries of one key is a violation (``VIOLATIONS``)."""
    client = _client(_control()["url"])
    fail = {v.decode() for v in client.smembers(FAIL)}
    keys = [m.field(b"k") for m in messages if m.field(b"k") is not None]
    if len(keys) != len(set(keys)):
        client.rpush(VIOLATIONS, "two entries of one key in one call")
    done = [m.id for m in messages if m.id not in fail]
    if done:
        client.rpush(BYTES_DONE, *done)
    return [Result.failure(f"refused {m.id}") if m.id in fail else Result.success()
            for m in messages]
