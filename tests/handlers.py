"""Handlers used by the tests (imported on executors as tests.handlers:...)."""

from __future__ import annotations

import hashlib

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
    """Fails messages with a ``fail`` field, and any whose bytes changed on the way."""
    results = []
    for m in messages:
        if m.field(CHECKSUM) != checksum(m.fields):
            results.append(Result.failure("corrupted: checksum mismatch"))
        elif m.field(b"fail") is not None:
            results.append(Result.failure(f"refused {m.id}"))
        else:
            results.append(Result.success())
    return results


def raises(messages: list[Message]) -> list[Result]:
    raise ValueError("boom")


def garbage(messages: list[Message]) -> object:
    return {"not": "a list"}


NOT_CALLABLE = 42
