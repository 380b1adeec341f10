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

import redis
from redis.backoff import ExponentialBackoff
from redis.exceptions import (
    AuthenticationError,
    AuthorizationError,
    NoPermissionError,
    ResponseError,
)
from redis.retry import Retry

from recovery.config import RedisParams
from recovery.errors import (
    RecoveryError,
    RedisAuthError,
    RedisPermissionError,
    RedisUnavailableError,
    StreamUnitError,
)

RETRIES = 3
RAW_REPLY_COMMANDS = ("XAUTOCLAIM", "XPENDING", "XRANGE", "XINFO GROUPS", "XINFO CONSUMERS")


def connect(params: RedisParams) -> redis.Redis:
    """A client for `params`, with raw (unparsed, bytes) replies for stream commands."""
    kwargs: dict[str, object] = {
        "username": params.username,
        "password": params.password,
        "socket_connect_timeout": params.connect_timeout_s,
        "socket_timeout": params.socket_timeout_s,
        "retry": Retry(ExponentialBackoff(cap=1.0, base=0.1), RETRIES),
        "client_name": "stream-recovery",
        "protocol": 2,
    }
    if params.url.startswith("rediss://"):
        kwargs.update(
            ssl_ca_certs=params.tls_ca_file,
            ssl_certfile=params.tls_cert_file,
            ssl_keyfile=params.tls_key_file,
            ssl_check_hostname=params.tls_check_hostname,
            ssl_cert_reqs="required" if params.tls_check_hostname else "optional",
        )
    client = redis.Redis.from_url(params.url, **kwargs)
    for command in RAW_REPLY_COMMANDS:
        client.set_response_callback(command, _raw_reply)
    return client


def _raw_reply(response: object, **_: object) -> object:
    return response


def where(params: RedisParams) -> str:
    """host:port of the server, for messages (never the password)."""
    rest = params.url.split("://", 1)[1]
    return rest.split("/", 1)[0].rsplit("@", 1)[-1]


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
            f"Redis at {where(params)} refused the login ({_first_word(exc)}): check "
            "redis.username and the password (RECOVERY_REDIS__PASSWORD or redis.password_file)"
        ) from None
    except NoPermissionError as exc:
        raise RedisPermissionError(
            f"the Redis user may not run a command the job needs ({exc}): grant it in the "
            "user's ACL rule (see README, 'ACL')"
        ) from None
    except ResponseError as exc:
        raise _response_error(exc, params, stream, group) from None
    except (redis.ConnectionError, redis.TimeoutError, OSError) as exc:
        raise RedisUnavailableError(
            f"cannot reach Redis at {where(params)} ({type(exc).__name__}: {exc}): "
            "check redis.url, that the server runs, and the network"
        ) from None


def _response_error(exc: ResponseError, params: RedisParams, stream: str | None,
                    group: str | None) -> RecoveryError:
    text = str(exc)
    code = _first_word(exc)
    if code == "NOGROUP" and stream is not None:
        return StreamUnitError("no-group", stream, group,
                               "the stream or its consumer group does not exist")
    if code == "WRONGTYPE" and stream is not None:
        return StreamUnitError("wrong-type", stream, group, "the key is not a stream")
    if code in ("NOAUTH", "WRONGPASS"):
        return RedisAuthError(
            f"Redis at {where(params)} refused the login ({code}): check redis.username "
            "and the password (RECOVERY_REDIS__PASSWORD or redis.password_file)"
        )
    if code == "NOPERM":
        return RedisPermissionError(
            f"the Redis user may not run a command the job needs ({text}): grant it in the "
            "user's ACL rule (see README, 'ACL')"
        )
    return RecoveryError(f"Redis at {where(params)} answered an error: {text}")


def _first_word(exc: Exception) -> str:
    text = str(exc).strip()
    return text.split(" ", 1)[0].upper() if text else type(exc).__name__
