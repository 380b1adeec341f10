"""Opening Redis clients and turning Redis failures into the job's typed errors.

Retry policy, chosen on purpose: every command the job sends is safe to repeat. Claims are
reconciled against the job consumer's own PEL (a lost XAUTOCLAIM reply is recovered by the
XPENDING read that follows), dead-letter moves and acks are conditional server-side scripts
(an entry that is no longer pending and ours is left alone). So a few quick retries on
connection errors are allowed, with a bounded backoff, and never the default 10.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TypeVar

import redis
from redis.backoff import ExponentialBackoff
from redis.exceptions import (
    AskError,
    AuthenticationError,
    AuthorizationError,
    InvalidResponse,
    NoPermissionError,
    ResponseError,
)

from recovery.errors import (
    RecoveryError,
    RedisAuthError,
    RedisPermissionError,
    RedisUnavailableError,
    StreamUnitError,
)
from recovery.params import RedisParams
from recovery.redis_io.acl_errors import denied_command, is_script_denial
from recovery.redis_io.cluster import host_port, open_client, redirected_error
from recovery.redis_io.error_codes import error_code, server_text
from recovery.redis_io.retries import CountingRetry
from recovery.redis_io.tls_errors import tls_hint

RETRIES = 3
T = TypeVar("T")
RAW_REPLY_COMMANDS = ("XAUTOCLAIM", "XCLAIM", "XPENDING", "XRANGE", "XREVRANGE", "XINFO GROUPS",
                      "XINFO CONSUMERS")



def connect(params: RedisParams) -> redis.Redis:
    """A client for `params`, with raw (unparsed, bytes) replies for stream commands, whose
    every request and reply is bounded whole (``recovery.redis_io.deadline``)."""
    kwargs: dict[str, object] = {
        "username": params.username,
        "password": params.password,
        "socket_connect_timeout": params.connect_timeout_s,
        "socket_timeout": params.socket_timeout_s,  # per read, and the base of the bound
        "min_transfer_bytes_per_s": params.min_transfer_bytes_per_s,  # 1 s more per this many bytes
        # a pause between tries never longer than a reply's wait (the lease keeper's short one)
        "retry": CountingRetry(ExponentialBackoff(cap=min(1.0, params.socket_timeout_s),
                                                  base=0.1), RETRIES),
        "client_name": "stream-recovery",
        "protocol": 2,
    }
    if params.url.startswith("rediss://"):
        kwargs.update(
            ssl_ca_certs=params.tls_ca_file,
            ssl_certfile=params.tls_cert_file,
            ssl_keyfile=params.tls_key_file,
            ssl_check_hostname=params.tls_check_hostname,
            # The chain is always verified; tls_check_hostname only drops the name match.
            ssl_cert_reqs="required",
        )
    with redis_errors(params):  # "auto" asks the server whether it is a cluster
        # A StreamCluster answers like redis.Redis for everything the job sends.
        client: redis.Redis = open_client(params.url, kwargs, params.cluster)  # type: ignore[assignment]
    for command in RAW_REPLY_COMMANDS:
        client.set_response_callback(command, _raw_reply)
    return client


def _raw_reply(response: object, **_: object) -> object:
    return response


def where(params: RedisParams) -> str:
    """host:port of the server, for messages (never the password)."""
    return host_port(params.url)


@contextlib.contextmanager
def redis_errors(params: RedisParams, stream: str | None = None, group: str | None = None
                 ) -> Iterator[None]:
    """Translate redis-py exceptions into typed, one-line RecoveryErrors."""
    try:
        yield
    except RecoveryError:
        raise
    except (AuthenticationError, AuthorizationError) as exc:
        raise RedisAuthError(
            f"Redis at {where(params)} refused the login ({error_code(exc)}): check "
            "redis.username and the password (RECOVERY_REDIS__PASSWORD or redis.password_file)"
        ) from None
    except NoPermissionError as exc:
        raise permission_error(exc, params) from None
    except AskError as exc:  # MOVED or ASK: a cluster node, and redis.cluster = false
        raise redirected_error(exc, where(params)) from None
    except ResponseError as exc:
        raise _response_error(exc, params, stream, group) from None
    except (redis.ConnectionError, redis.TimeoutError, OSError) as exc:
        raise RedisUnavailableError(
            f"cannot reach Redis at {where(params)} ({type(exc).__name__}: {exc}): "
            + (tls_hint(str(exc), params.url)
               or "check redis.url, that the server runs, and the network")
        ) from None
    except InvalidResponse as exc:  # not the Redis protocol: something else answered
        raise RedisUnavailableError(
            f"Redis at {where(params)} gave an unexpected reply ({type(exc).__name__}: {exc}): "
            "check that redis.url points at a Redis server"
        ) from None


def _response_error(exc: ResponseError, params: RedisParams, stream: str | None,
                    group: str | None) -> RecoveryError:
    text = str(exc)
    code = error_code(exc)  # also inside a script's error on Redis 6.2
    if code == "NOGROUP" and stream is not None:
        return StreamUnitError("no-group", stream, group,
                               "the stream or its consumer group does not exist")
    if code == "WRONGTYPE" and stream is not None:
        return StreamUnitError("wrong-type", stream, group, "the key is not a stream")
    if no_such_key(exc) and stream is not None:  # XINFO ("ERR ...")
        return StreamUnitError("no-key", stream, group, "the stream does not exist (any more)")
    if code in ("NOAUTH", "WRONGPASS"):
        return RedisAuthError(
            f"Redis at {where(params)} refused the login ({code}): check redis.username "
            "and the password (RECOVERY_REDIS__PASSWORD or redis.password_file)"
        )
    if code == "NOPERM" or is_script_denial(text):  # script refusals: no code, see acl_errors
        return permission_error(exc, params)
    return RecoveryError(f"Redis at {where(params)} answered an error: {text}")


def permission_error(exc: ResponseError, params: RedisParams) -> RedisPermissionError:
    """A one-line error naming the command (or key) the ACL user may not use, and the fix."""
    text = server_text(exc)
    user = params.username or "default"
    denied = denied_command(text)
    if denied:
        command = denied.upper().replace("|", " ")
        return RedisPermissionError(
            f"the Redis user {user!r} may not run {command}, which the job needs: grant it, "
            f"e.g. ACL SETUSER {user} +{denied} (see README, 'ACL')"
        )
    return RedisPermissionError(
        f"the Redis user {user!r} was refused ({text}): grant it the job's commands and "
        "access to the stream and dead-letter keys in its ACL rule (see README, 'ACL')"
    )


def no_such_key(reply: object) -> bool:
    """True for XINFO's answer about a missing key (``ERR no such key``)."""
    return isinstance(reply, ResponseError) and server_text(reply).lower() == "no such key"


def wrong_type(reply: object) -> bool:
    """True for a WRONGTYPE error: the key holds another type."""
    return isinstance(reply, ResponseError) and error_code(reply) == "WRONGTYPE"


def key_refused(reply: object) -> bool:
    """True for an ACL refusal of the key (its pattern), not of the command."""
    return isinstance(reply, NoPermissionError) and not denied_command(server_text(reply))


@dataclass(frozen=True)
class RedisConn:
    """An open client and the params it was opened from, travelling together.

    `client` is what the ``recovery.redis_io`` functions take (a ``redis.Redis``, or a
    ``StreamCluster`` on a cluster); `params` is where it points and who logs in, for
    messages. :meth:`errors` translates redis-py's exceptions raised inside it into the
    job's typed, one-line errors (:func:`redis_errors`), naming `stream` and `group` where
    given. Made by :meth:`open` (the driver's one client, a partition's one client);
    nothing about it travels to the executors: each opens its own from the params.
    """

    client: redis.Redis
    params: RedisParams

    @classmethod
    def open(cls, params: RedisParams) -> RedisConn:
        """A connection to the server `params` names (:func:`connect`); a failure to open
        it is raised as the job's typed error."""
        with redis_errors(params):
            return cls(connect(params), params)

    def errors(self, stream: str | None = None, group: str | None = None
               ) -> contextlib.AbstractContextManager[None]:
        """A block whose redis-py exceptions become the job's typed errors."""
        return redis_errors(self.params, stream, group)

    def checked(self, reply: T | Exception, stream: str | None = None,
                group: str | None = None) -> T:
        """`reply` (one reply of a pipeline or a MULTI), or the error the server answered in
        its place raised as the job's typed error for `stream` and `group`."""
        if isinstance(reply, Exception):
            with self.errors(stream, group):
                raise reply
        return reply

    def close(self) -> None:
        """Close the client's connections (the object is not used after)."""
        self.client.close()

    def __enter__(self) -> RedisConn:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()
