"""Many commands in one round trip on a standalone server, without redis-py's Pipeline:
as they come (:func:`exchange`) or as one MULTI/EXEC transaction (:func:`transaction`), also
sent now and read later (:class:`SentTransaction`).

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
from redis.exceptions import ConnectionError, DataError, ResponseError, TimeoutError


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
    return _read(conn, callbacks)


def _read(conn: Connection, callbacks: list[Callable[..., object] | None]) -> list[object]:
    """One reply per callback off `conn`, each after its callback (None: raw); an error the
    server answered is returned in its place."""
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
    return _executed(exchange(client, _multi(commands), parse=False))


def _multi(commands: Sequence[Sequence[object]]) -> list[Sequence[object]]:
    return [("MULTI",), *commands, ("EXEC",)]


def _executed(replies: list[object]) -> list[Any]:
    """The EXEC reply's elements of a MULTI's replies, or the error that aborted it."""
    refused = next((r for r in replies[1:-1] if isinstance(r, ResponseError)), None)
    if refused is not None:
        raise refused
    if isinstance(replies[-1], Exception):
        raise replies[-1]
    return list(replies[-1])  # type: ignore[call-overload]


class SentTransaction:
    """`commands` in one MULTI/EXEC sent at once on a pooled connection of its own and read
    later (:meth:`replies`), so the server runs it while the caller does other work; the
    replies are :func:`transaction`'s. Read it or :meth:`close` it: until then it holds its
    connection, which nothing else uses."""

    def __init__(self, client: redis.Redis, commands: Sequence[Sequence[object]]) -> None:
        self._pool = client.connection_pool
        self._conn: Connection | None = self._pool.get_connection()
        self._request = packed(_multi(commands))
        self._count = len(commands) + 2
        try:
            self._conn.send_packed_command(self._request)
            self._sent = True
        except (ConnectionError, TimeoutError):  # sent again when read, per the retry policy
            self._conn.disconnect()
            self._sent = False

    def replies(self) -> list[Any]:
        """Read the replies (the EXEC reply's elements, an error the server answered in its
        place; a refused command's error raised, as by :func:`transaction`). A connection
        lost after the send gets the transaction sent again per the client's retry policy,
        as :func:`transaction` retries it."""
        conn = self._take()
        try:
            return _executed(conn.retry.call_with_retry(  # type: ignore[no-any-return]
                lambda: self._attempt(conn), lambda _error: conn.disconnect()))
        finally:
            self._pool.release(conn)

    def close(self) -> None:
        """Drop it unread (if not read yet): its connection is closed, so no reply of it
        reaches the pool's next user."""
        if self._conn is not None:
            conn = self._take()
            conn.disconnect()
            self._pool.release(conn)

    def _attempt(self, conn: Connection) -> list[object]:
        if not self._sent:
            conn.send_packed_command(self._request)
        self._sent = False  # a retry sends it again
        return _read(conn, [None] * self._count)

    def _take(self) -> Connection:
        conn, self._conn = self._conn, None
        if conn is None:
            raise RuntimeError("a sent transaction is read or closed once")
        return conn


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
