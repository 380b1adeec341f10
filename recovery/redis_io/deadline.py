"""A bound on each whole Redis request and reply, not only on each socket read.

redis-py's ``socket_timeout`` bounds each ``recv``: a server, or a proxy in front of it, that
sends its reply one byte at a time (each byte within the timeout) holds a command for as long
as it likes. Here a request must be sent whole, and each reply read whole once the client
starts waiting for it, within ``redis.socket_timeout_s`` plus one second per
``redis.min_transfer_bytes_per_s`` bytes moved so far (the rule of Apache's mod_reqtimeout
``MinRate``): a silent server gets ``socket_timeout_s`` as before, a big reply on a slow but
honest link gets the time its size needs, and a dripping one ends in a ``redis.TimeoutError``
(retried like a silent server's, then the job's one-line error).

The hook is the socket. :class:`BoundedConnection` (and :class:`BoundedSSLConnection`) wrap
the socket redis-py connects in a :class:`BoundedSocket`, whose ``recv`` and ``recv_into``
(what the hiredis and the pure-Python parsers read with, over TLS too) and ``sendall``
shorten the per-read timeout to what is left of the bound while the connection's
:class:`TransferClock` runs; the connection runs it over each ``send_packed_command`` and
each ``read_response`` (one reply: a pipeline's replies are each bounded once read, so
replies read later than they were sent, ``round_trips.send``, are not cut short). A
cluster's node connections get the same classes through :class:`BoundedPool`.

The job sends no blocking command (XREAD BLOCK, BLPOP, WAIT): one would need its block time
added to the bound.
"""

from __future__ import annotations

import functools
import socket
import time
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from redis.connection import Connection, ConnectionPool, SSLConnection
from redis.exceptions import TimeoutError as RedisTimeoutError

T = TypeVar("T")
RATE_OPTION = "min_transfer_bytes_per_s"  # the connections' keyword for the rate
ClockState = tuple[str, float, float | None, int]  # what, started, grace (s), bytes moved


class TransferClock:
    """The bound of one transfer (a request sent, or a reply read): the grace (the socket
    timeout, s) plus one second per `min_bytes_per_s` bytes moved since it started."""

    def __init__(self, min_bytes_per_s: float) -> None:
        self.min_bytes_per_s = min_bytes_per_s
        self._what = ""
        self._started = 0.0
        self._grace_s: float | None = None  # None: no transfer timed
        self._moved = 0
        self.raised: RedisTimeoutError | None = None  # the error of the last expired transfer

    def start(self, what: str, grace_s: float | None) -> ClockState:
        """Time `what` ("request", "reply") from now; `grace_s` None: no bound. Returns the
        state before, for :meth:`restore` (a transfer inside another, e.g. the handshake
        of a connection opened for a request, is timed on its own)."""
        before = (self._what, self._started, self._grace_s, self._moved)
        self._what, self._started, self._grace_s, self._moved = (
            what, time.monotonic(), grace_s, 0)
        self.raised = None
        return before

    def restore(self, state: ClockState) -> None:
        self._what, self._started, self._grace_s, self._moved = state

    def moved(self, count: int) -> None:
        """`count` more bytes sent or received."""
        self._moved += count

    def left_s(self) -> float | None:
        """Seconds left of the bound (<= 0: past it); None while no transfer is timed."""
        if self._grace_s is None:
            return None
        return (self._started + self._grace_s + self._moved / self.min_bytes_per_s
                - time.monotonic())

    def expired(self) -> RedisTimeoutError:
        """The error for a transfer past its bound: one line, what was moved and the rule."""
        grace_s = self._grace_s or 0.0
        bound = grace_s + self._moved / self.min_bytes_per_s
        self.raised = RedisTimeoutError(
            f"the {self._what} was not done within {bound:.1f} s ({self._moved} bytes "
            f"moved; redis.socket_timeout_s {grace_s:g} s plus 1 s per "
            f"redis.min_transfer_bytes_per_s {self.min_bytes_per_s:g} bytes): the server, "
            "or a proxy in front of it, sends too slowly")
        return self.raised


class BoundedSocket:
    """A connected socket (plain or TLS) whose reads and sends end by the bound of the
    transfer its clock times; everything else is the socket's own."""

    def __init__(self, sock: socket.socket, clock: TransferClock) -> None:
        self._sock = sock
        self._clock = clock
        self._timeout = sock.gettimeout()  # per operation, as redis-py set it

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sock, name)

    def settimeout(self, value: float | None) -> None:
        self._timeout = value
        self._sock.settimeout(value)

    def gettimeout(self) -> float | None:
        return self._timeout

    def recv(self, bufsize: int, *flags: int) -> bytes:
        data = self._bounded(self._sock.recv, bufsize, *flags)
        self._clock.moved(len(data))
        return data

    def recv_into(self, buffer: Any, *size_and_flags: int) -> int:
        count = self._bounded(self._sock.recv_into, buffer, *size_and_flags)
        self._clock.moved(count)
        return count

    def sendall(self, data: Any) -> None:
        """All of `data`, in ``send`` calls each bounded (a plain socket's own ``sendall``
        bounds the whole by the timeout alone, a TLS socket's each record)."""
        view = memoryview(data).cast("B")
        while view:
            sent = self._bounded(self._sock.send, view)
            self._clock.moved(sent)
            view = view[sent:]

    def _bounded(self, operation: Callable[..., T], *args: Any) -> T:
        left = self._clock.left_s()
        if left is None or (self._timeout is not None and self._timeout <= left):
            return operation(*args)  # the socket's own timeout ends it first
        if left <= 0:
            raise self._clock.expired()
        self._sock.settimeout(left)
        try:
            return operation(*args)
        except TimeoutError:  # socket.timeout: this read's share of the bound ran out
            raise self._clock.expired() from None
        finally:
            self._sock.settimeout(self._timeout)


class BoundedConnection(Connection):
    """A TCP connection whose requests and replies are bounded whole (the rate is the
    ``min_transfer_bytes_per_s`` keyword, bytes per second)."""

    def __init__(self, *args: Any, min_transfer_bytes_per_s: float, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._clock = TransferClock(min_transfer_bytes_per_s)

    def _connect(self) -> BoundedSocket:
        return BoundedSocket(super()._connect(), self._clock)

    def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        """Send `command`, the whole of it within its bound."""
        if not self._sock:  # connect (a handshake of its own) before the clock starts
            self.connect_check_health(check_health=False)
        before = self._clock.start("request", self.socket_timeout)
        try:
            super().send_packed_command(command, check_health)
        finally:
            self._clock.restore(before)

    def read_response(self, *args: Any, **kwargs: Any) -> Any:
        """One reply, the whole of it within its bound from now."""
        before = self._clock.start("reply", self.socket_timeout)
        try:
            return super().read_response(*args, **kwargs)
        except RedisTimeoutError as exc:
            # redis-py 8.2+ raises a parser's timeout again as "Timeout reading from ...":
            # the bound's own one-line error is what the operator needs.
            raise (self._clock.raised or exc) from None
        finally:
            self._clock.restore(before)


class BoundedSSLConnection(BoundedConnection, SSLConnection):
    """A TLS connection whose requests and replies are bounded whole (the socket wrapped
    once the TLS handshake, itself bounded whole by the socket timeout, is done)."""


BOUNDED: dict[type[Connection], type[BoundedConnection]] = {
    Connection: BoundedConnection, SSLConnection: BoundedSSLConnection,
    BoundedConnection: BoundedConnection, BoundedSSLConnection: BoundedSSLConnection}


class BoundedPool(ConnectionPool):
    """A ConnectionPool of bounded connections, of the (plain or TLS) kind it is given: a
    Redis Cluster builds its node pools from the URL (SSLConnection for ``rediss://``)."""

    def __init__(self, connection_class: type[Connection] = Connection, **kwargs: Any
                 ) -> None:
        super().__init__(connection_class=BOUNDED[connection_class], **kwargs)


def standalone_options(url: str, options: Mapping[str, Any]) -> dict[str, Any]:
    """`options` (with ``min_transfer_bytes_per_s``) for ``redis.Redis.from_url(url, ...)``:
    bounded connections, TLS ones for ``rediss://``."""
    tls = url.startswith("rediss://")
    return {**options, "connection_class": BoundedSSLConnection if tls else BoundedConnection}


def cluster_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """`options` (with ``min_transfer_bytes_per_s``) for ``RedisCluster.from_url``: node
    pools of bounded connections (the cluster client drops keywords it does not know, so
    the rate travels with the pool class)."""
    rest = dict(options)
    rate = rest.pop(RATE_OPTION)
    return {**rest, "connection_pool_class": functools.partial(BoundedPool, **{RATE_OPTION: rate})}
