"""Throwaway servers of every flavor the job supports, started by the tests themselves."""

from __future__ import annotations

from recovery.testing.local_redis import LocalServer, server_binary

# Every server the job supports, by the flavors of recovery.testing.local_redis.server_binary:
# Redis 7.0 (Debian), Valkey 8.1 and Redis 6.2, the oldest (README "Servers supported").
FLAVORS = ("redis", "valkey", "redis62")
# The two Redis versions whose reply shapes differ most (6.2: XAUTOCLAIM's nil entries, no
# lag, no inactive time, its own ACL error texts): for the slow fault and ACL-refusal tests,
# where a third server would cost more than it tells (Valkey answers as Redis 7.2 does).
REDIS_VERSIONS = ("redis", "redis62")


def start_server(flavor: str, *args: str) -> LocalServer:
    """A started server of `flavor` (one of FLAVORS) on a free port, with extra `args`."""
    binary = server_binary(flavor)
    if binary is None:  # a missing server is a broken install, not a reason to skip
        raise RuntimeError(f"no {flavor} server binary: run .ci/run or install it")
    return LocalServer(binary, args=args).start()
