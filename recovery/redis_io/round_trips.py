"""Round trips to Redis: many commands in one, on a standalone server or a Redis Cluster.

- :func:`each`: commands in pipelines of ``PIPELINE_CHUNK``, each reply or its error in
  order; :func:`in_transaction`: commands in one MULTI/EXEC;
- script calls queued by the caller's functions (:class:`Queued`) and sent together
  (:func:`script_replies`, NOSCRIPT answered by loading the scripts and sending again), read
  per item (:func:`run_script_calls`, :func:`run_unit_script_calls`), packed into calls by
  :func:`calls_of`;
- on a standalone server without redis-py's Pipeline: as they come (:func:`exchange`) or
  as one transaction (:func:`transaction`); or written now and read later (:func:`send`,
  :func:`send_transaction`), so that the server runs them while the caller works on
  something else.

redis-py's Pipeline spends more client CPU per command than the server spends on a cheap
read (it queues, wraps and parses each command in several Python calls). The driver reads a
few commands per stream (group health, progress, consumer clean-up) and the executors a few
per unit, so on runs of many small streams that CPU counts. :func:`exchange` packs the
commands at once, sends them and reads the replies straight off one pooled connection,
with the client's response callbacks and retry policy, as a non-transactional Pipeline would.
On a Redis Cluster, redis-py's cluster pipeline routes each command to the node of its key.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import redis
from hiredis import pack_command
from redis.cluster import RedisCluster
from redis.connection import Connection
from redis.exceptions import (
    ConnectionError,
    DataError,
    NoScriptError,
    ResponseError,
    TimeoutError,
)

from recovery.redis_io.error_codes import VANISHED, target_refused, unit_vanished
from recovery.redis_io.scripts import load_scripts

T = TypeVar("T")
# (items, queue): `queue(pipe)` queues one script call replying one element per item.
ScriptCall = tuple[Sequence[Any], Callable[[Any], object]]
# (items per unit, queue): `queue(pipe)` queues one script call replying one element per
# unit: a list of one element per item of that unit, or the error that unit answered.
UnitScriptCall = tuple[Sequence[Sequence[Any]], Callable[[Any], object]]


def exchange(client: redis.Redis, commands: Sequence[Sequence[object]],
             parse: bool = True) -> list[object]:
    """Send `commands` (each ``(name, *args)``) in one write and read one reply per command,
    in order: the reply after the client's response callback for that command (the raw
    reply without `parse`), or the error the server answered (returned, not raised). A
    connection lost midway is retried as a whole per the client's retry policy (every
    command the job sends this way is a read or safe to repeat), as redis-py's Pipeline
    does."""
    return send(client, commands, parse).replies()


class Sent:
    """Commands written on a pooled connection of their own, their replies not read yet
    (:func:`send`). Read them with :meth:`replies` (which gives the connection back), or
    :meth:`drop` them unread (the connection is closed: its replies would answer the next
    user's commands)."""

    def __init__(self, client: redis.Redis, commands: Sequence[Sequence[object]],
                 parse: bool, finish: Callable[[list[object]], list[Any]] | None = None
                 ) -> None:
        self._pool = client.connection_pool
        self._commands = commands
        self._callbacks: list[Callable[..., object] | None] = (
            _callbacks(client, commands) if parse else [None] * len(commands))
        self._finish = finish
        self._conn: Connection | None = self._pool.get_connection()
        self._written = False
        self._send_error: Exception | None = None
        try:
            self._conn.send_packed_command(packed(commands))
            self._written = True
        except (ConnectionError, TimeoutError) as error:  # the read's first failure: retried
            self._send_error = error                    # per the retry policy from there
        except BaseException:
            self.drop()
            raise

    def replies(self) -> list[Any]:
        """The replies as :func:`exchange` gives them (passed through `finish` where
        given). A connection lost before or while they are read sends the commands again
        and reads them, per the client's retry policy."""
        conn = self._conn
        if conn is None:
            raise RuntimeError("replies already read or dropped")
        try:
            replies = conn.retry.call_with_retry(  # type: ignore[no-any-return]
                lambda: self._read_or_resend(conn), lambda _error: conn.disconnect())
        except BaseException:
            self.drop()
            raise
        self._pool.release(conn)
        self._conn = None
        return self._finish(replies) if self._finish is not None else replies

    def drop(self) -> None:
        """Give the connection back closed, replies unread (nothing if already read)."""
        if self._conn is not None:
            self._conn.disconnect()
            self._pool.release(self._conn)
            self._conn = None

    def _read_or_resend(self, conn: Connection) -> list[object]:
        """The replies written ahead; after a failure, a whole round trip again."""
        if self._send_error is not None:
            error, self._send_error = self._send_error, None
            raise error
        if self._written:
            self._written = False
            return _read(conn, self._callbacks)
        return _round_trip(conn, self._commands, self._callbacks)


def send(client: redis.Redis, commands: Sequence[Sequence[object]], parse: bool = True
         ) -> Sent:
    """Write `commands` in one go on a connection of their own and return at once; their
    replies, read from the Sent, are :func:`exchange`'s."""
    return Sent(client, commands, parse)


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
    """One reply per callback, read off `conn`: the callback's result (the raw reply for
    None), or the error the server answered in its place."""
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
    return send_transaction(client, commands).replies()


def send_transaction(client: redis.Redis, commands: Sequence[Sequence[object]]) -> Sent:
    """:func:`transaction` written now, its replies read from the Sent (which raises as
    :func:`transaction` does)."""
    return Sent(client, [("MULTI",), *commands, ("EXEC",)], parse=False,
                finish=_transaction_replies)


def _transaction_replies(replies: list[object]) -> list[Any]:
    """A MULTI/EXEC's replies (MULTI, each QUEUED, EXEC) as its commands' replies; raises the
    error of a command refused while queued, or EXEC's own error."""
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


PIPELINE_CHUNK = 1000


def each(client: redis.Redis, commands: Sequence[Sequence[object]]) -> list[object]:
    """Send `commands` in pipelines of ``PIPELINE_CHUNK`` (no transaction): one round trip per
    chunk instead of one per command. Returns each raw reply in order, or the exception the
    server answered for that command (returned, not raised: callers decide per command).
    On a standalone server without redis-py's Pipeline (:func:`exchange`);
    on a Redis Cluster its pipeline routes each command to the node of its key."""
    replies: list[object] = []
    for start in range(0, len(commands), PIPELINE_CHUNK):
        if not isinstance(client, RedisCluster):
            replies += exchange(client, commands[start : start + PIPELINE_CHUNK])
            continue
        pipe = client.pipeline(transaction=False)
        for command in commands[start : start + PIPELINE_CHUNK]:
            pipe.execute_command(*command)
        replies += pipe.execute(raise_on_error=False)
    return replies


def in_transaction(client: redis.Redis, commands: Sequence[Sequence[object]]) -> list[Any]:
    """`commands` in one MULTI/EXEC: each raw reply, or the error the server answered for it
    in its place. On a standalone server without redis-py's Pipeline
    (:func:`transaction`); on a Redis Cluster its transaction
    pipeline (the commands' keys must share a slot)."""
    if not isinstance(client, RedisCluster):
        return transaction(client, commands)
    pipe = client.pipeline(transaction=True)
    for command in commands:
        pipe.execute_command(*command)
    return pipe.execute(raise_on_error=False)  # type: ignore[no-any-return]


def run_script_calls(client: redis.Redis, calls: Sequence[ScriptCall]) -> list[tuple[Any, Any]]:
    """Send script calls in one pipeline; return (item, reply element) pairs in call order.

    A call whose stream or group vanished mid-run (NOGROUP, WRONGTYPE) yields ``VANISHED`` for
    each of its items, so other units go on. Any other error reply is raised.
    """
    replies = script_replies(client, [queue for _, queue in calls])
    pairs: list[tuple[Any, Any]] = []
    for (items, _), reply in zip(calls, replies, strict=True):
        pairs += _item_replies(items, reply)
    return pairs


def run_unit_script_calls(client: redis.Redis, calls: Sequence[UnitScriptCall]
                          ) -> list[tuple[Any, Any]]:
    """:func:`run_script_calls` for script calls that carry several units each: (item, reply
    element) pairs in call and unit order. A unit whose stream or group vanished (its error
    in its place, or the whole call's) yields ``VANISHED`` for each of its items; the other
    units of its call are read as usual. Any other error reply is raised."""
    replies = script_replies(client, [queue for _, queue in calls])
    pairs: list[tuple[Any, Any]] = []
    for (units, _), reply in zip(calls, replies, strict=True):
        unit_replies = [reply] * len(units) if isinstance(reply, Exception) else reply
        for items, unit_reply in zip(units, unit_replies, strict=True):
            pairs += _item_replies(items, unit_reply)
    return pairs


def _item_replies(items: Sequence[Any], reply: Any) -> list[tuple[Any, Any]]:
    """(item, reply element) pairs of one call or unit; ``VANISHED`` for each item when its
    reply is a NOGROUP / WRONGTYPE error, the ``TargetRefused`` when it is a move script's
    refusal of its target (NOTLETTERS); any other error raised."""
    if isinstance(reply, Exception):
        refused = target_refused(reply)
        if refused is None and not unit_vanished(reply):
            raise reply
        reply = [VANISHED if refused is None else refused] * len(items)
    return list(zip(items, reply, strict=True))


def calls_of(groups: Sequence[T], per_call: int, size: Callable[[T], int]) -> list[list[T]]:
    """`groups` (each what must go in one script call, e.g. a unit's entries, of `size(g)`
    items) packed in order into calls of at most `per_call` items in all; a group with more
    has a call of its own."""
    calls: list[list[T]] = []
    filled = per_call
    for group in groups:
        if filled + size(group) > per_call:
            calls.append([])
            filled = 0
        calls[-1].append(group)
        filled += size(group)
    return calls


def script_replies(client: redis.Redis, queues: Sequence[Callable[[Any], object]]
                   ) -> list[Any]:
    """Each `queue(pipe)` queues one script call; all are sent in one pipeline. Returns each
    call's reply, or the error the server answered for it (returned, not raised).

    Calls that met NOSCRIPT (the server restarted or flushed its script cache since the
    scripts were loaded) did not run: the scripts are loaded and those calls sent once more.
    """
    replies = _execute(client, queues)
    again = [i for i, r in enumerate(replies) if isinstance(r, NoScriptError)]
    if again:
        load_scripts(client)
        for i, reply in zip(again, _execute(client, [queues[i] for i in again]), strict=True):
            replies[i] = reply
    return replies


def _execute(client: redis.Redis, queues: Sequence[Callable[[Any], object]]) -> list[Any]:
    """Each queued call's reply or error, sent with ``each`` (one write on a standalone
    server; routed by key on a Redis Cluster)."""
    queued = Queued()
    for queue in queues:
        queue(queued)
    return each(client, queued.commands)


class Queued:
    """Stands in for a pipeline to collect what queue functions send (``evalsha``,
    ``execute_command``) as command tuples for ``recovery.redis_io.streams.each``."""

    def __init__(self) -> None:
        self.commands: list[tuple[object, ...]] = []

    def evalsha(self, sha: str, numkeys: int, *keys_and_args: object) -> None:
        self.commands.append(("EVALSHA", sha, numkeys, *keys_and_args))

    def execute_command(self, *args: object) -> None:
        self.commands.append(args)
