"""Many commands in one round trip on a standalone server, without redis-py's Pipeline:
as they come (:func:`exchange`) or as one MULTI/EXEC transaction (:func:`transaction`).

redis-py's Pipeline spends more client CPU per command than the server spends on a cheap
read (it queues, wraps and parses each command in several Python calls). The driver reads a
few commands per stream (group health, progress, consumer clean-up) and the executors a few
per unit, so on runs of many small streams that CPU counts. :func:`exchange` packs the
commands at once, sends them and reads the replies straight off one pooled connection,
with the client's response callbacks and retry policy, as a non-transactional Pipeline would.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import redis
from hiredis import pack_command
from redis.connection import Connection
from redis.exceptions import DataError, ResponseError


def exchange(client: redis.Redis, commands: Sequence[Sequence[object]],
             parse: bool = True) -> list[object]:
    """Send `commands` (each ``(name, *args)``) in one write and read one reply per command,
    in order: the reply after the client's response callback for that command (the raw
    reply without `parse`), or the error the server answered (returned, not raised). A
    connection lost midway is retried as a whole per the client's retry policy (every
    command the job sends this way is a read or safe to repeat), as redis-py's Pipeline
    does."""
    pool = client.connection_pool
    conn = pool.get_connection()
    callbacks: list[Callable[..., object] | None] = (
        _callbacks(client, commands) if parse else [None] * len(commands))
    try:
        return conn.retry.call_with_retry(  # type: ignore[no-any-return]
            lambda: _round_trip(conn, commands, callbacks), lambda _error: conn.disconnect())
    finally:
        pool.release(conn)


def _callbacks(client: redis.Redis, commands: Sequence[Sequence[object]]
               ) -> list[Callable[..., object] | None]:
    """Each command's response callback (None for none), looked up once per name."""
    by_name: dict[object, Callable[..., object] | None] = {}
    for command in commands:
        name = command[0]
        if name not in by_name:
            by_name[name] = client.response_callbacks.get(str(name))
    return [by_name[command[0]] for command in commands]


def _round_trip(conn: Connection, commands: Sequence[Sequence[object]],
                callbacks: list[Callable[..., object] | None]) -> list[object]:
    conn.send_packed_command(packed(commands))
    replies: list[object] = []
    for callback in callbacks:
        try:
            reply = conn.read_response()
        except ResponseError as error:
            replies.append(error)
            continue
        replies.append(callback(reply) if callback is not None else reply)
    return replies


def transaction(client: redis.Redis, commands: Sequence[Sequence[object]]) -> list[Any]:
    """`commands` in one MULTI/EXEC, sent and read as :func:`exchange` does: each command's
    raw reply (no response callbacks), or the error the server answered for it in place.
    A command refused while queued (unknown, wrong arity, denied by ACL) aborts the whole
    transaction: that error is raised, and nothing ran."""
    replies = exchange(client, [("MULTI",), *commands, ("EXEC",)], parse=False)
    refused = next((r for r in replies[1:-1] if isinstance(r, ResponseError)), None)
    if refused is not None:
        raise refused
    if isinstance(replies[-1], Exception):
        raise replies[-1]
    return list(replies[-1])  # type: ignore[call-overload]


def packed(commands: Sequence[Sequence[object]]) -> list[bytes]:
    """`commands` in RESP, ready for one write, each packed by ``hiredis.pack_command``
    directly: redis-py's packer first looks at every argument in Python, a cost per argument
    that counts for commands of thousands of IDs. A command name with a space (``"XINFO
    GROUPS"``) is split as redis-py splits it; an argument hiredis cannot pack (str, bytes,
    int and float only) raises DataError, as redis-py does."""
    try:
        return [b"".join(pack_command(_split_name(command)) for command in commands)]
    except TypeError as error:
        raise DataError(str(error)) from error


def _split_name(command: Sequence[object]) -> tuple[Any, ...]:
    name = command[0]
    if isinstance(name, str) and " " in name:
        return (*name.split(), *command[1:])
    return tuple(command)
