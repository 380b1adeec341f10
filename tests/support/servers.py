"""Throwaway servers of every flavor the job supports, started by the tests themselves."""

from __future__ import annotations

from redis import Redis

from recovery.testing.local_redis import LocalServer, server_binary

# Every server the job supports, by the flavors of recovery.testing.local_redis.server_binary:
# Redis 7.0 (Debian), Valkey 8.1 and Redis 6.2, the oldest (README "Servers supported").
FLAVORS = ("redis", "valkey", "redis62")
# The two Redis versions whose reply shapes differ most (6.2: XAUTOCLAIM's nil entries, no
# lag, no inactive time, its own ACL error texts): for the slow fault and ACL-refusal tests,
# where a third server would cost more than it tells (Valkey answers as Redis 7.2 does).
REDIS_VERSIONS = ("redis", "redis62")


def command_calls(client: Redis, command: str) -> int:
    """How many times the server ran `command` so far (INFO commandstats), with its
    subcommands (``xinfo``: 7.0+ counts ``xinfo|consumers`` apart, 6.2 all together)."""
    stats = client.info("commandstats")
    return sum(int(v["calls"]) for k, v in stats.items()
               if k.split("|")[0] == f"cmdstat_{command}")


def start_server(flavor: str, *args: str) -> LocalServer:
    """A started server of `flavor` (one of FLAVORS) on a free port, with extra `args`."""
    binary = server_binary(flavor)
    if binary is None:  # a missing server is a broken install, not a reason to skip
        raise RuntimeError(f"no {flavor} server binary: run .ci/run or install it")
    return LocalServer(binary, args=args).start()
