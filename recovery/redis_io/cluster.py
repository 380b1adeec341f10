"""Redis Cluster: detecting it, a cluster client that answers like the job's standalone one,
and work units grouped by the primary that owns their keys.

The job's Redis code (``redis_io/streams.py``, ``redis_io/scripts.py``,
``executor/apply.py``, ``executor/lease.py``, ``driver/discovery.py``) is written against a
standalone ``redis.Redis`` with raw replies for stream commands.
:class:`StreamCluster` is a ``redis.cluster.RedisCluster`` that keeps that contract, so the same
code runs on a cluster, while redis-py routes every command by its key's hash slot, follows
MOVED and ASK redirections and refreshes the slot map after a failover:

- reply callbacks set with ``set_response_callback`` apply on the node clients (a plain
  RedisCluster applies them *after* the node client's own parsing, so raw replies were lost);
- in pipelines, script calls go out as EVAL with the script's source: RedisCluster pipelines
  refuse ``evalsha()``, and EVAL cannot fail with NOSCRIPT on a node that never saw the script
  (a replica promoted by a failover, a node added later);
- MULTI/EXEC pipelines work when all their keys share one slot (``claim_batch`` uses one key).

A script's keys must share one slot: the dead-letter stream always shares its source's slot
(``recovery/redis_io/dlq_names.py``), so every script call of the job is single-slot.

Cluster mode is chosen by ``redis.cluster``: ``auto`` (default) asks the server (INFO cluster,
``cluster_enabled:1``) when the client opens; ``true`` / ``false`` skip the question.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar, cast
from urllib.parse import urlsplit

import redis
from redis.cluster import ClusterNode, ClusterPipeline, RedisCluster
from redis.exceptions import AskError, MovedError, RedisClusterException
from redis.typing import ScriptTextT

from recovery.errors import ConfigError, RecoveryError, RedisUnavailableError
from recovery.redis_io.deadline import cluster_options, standalone_options
from recovery.redis_io.retries import count_failure

T = TypeVar("T")
ReplyCallback = Callable[..., Any]
ClusterMode = bool | str  # True, False or "auto"


class StreamCluster(RedisCluster):
    """A RedisCluster whose node clients use the reply callbacks set on it, and whose
    pipelines send script calls as EVAL (see the module docstring)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._node_callbacks: dict[str, ReplyCallback] = {}
        self._script_sources: dict[str, ScriptTextT] = {}
        super().__init__(*args, **kwargs)

    def set_response_callback(self, command: str, callback: ReplyCallback) -> None:
        """Parse `command`'s replies with `callback` on every node (raw replies in, as a
        standalone client's callback sees them)."""
        self._node_callbacks[command] = callback

    def get_redis_connection(self, node: ClusterNode) -> redis.Redis:
        """The node's client, with this cluster's reply callbacks (nodes appear lazily, e.g.
        after a failover, so they are applied on every use: a few dict writes)."""
        client = super().get_redis_connection(node)
        client.response_callbacks.update(self._node_callbacks)
        return client

    def _execute_command(self, target_node: ClusterNode, *args: Any, **kwargs: Any) -> Any:
        """redis-py's, counting a failure its loop may retry on the client's retry policy
        (``recovery.redis_io.retries``: the command of a lost reply may have run)."""
        try:
            return super()._execute_command(target_node, *args, **kwargs)
        except self.ERRORS_ALLOW_RETRY:
            count_failure(self.retry)
            raise

    def register_script(self, script: ScriptTextT) -> Any:
        """A Script, whose source pipelines can send as EVAL."""
        registered = super().register_script(script)
        self._script_sources[registered.sha] = script
        return registered

    def pipeline(self, transaction: bool | None = None, shard_hint: Any = None
                 ) -> StreamClusterPipeline:
        """redis-py's cluster pipeline, with this client's callbacks and EVAL for scripts."""
        pipe = super().pipeline(transaction=transaction, shard_hint=shard_hint)
        # Built by redis-py (its constructor arguments change between versions), then
        # given the two behaviours above.
        pipe.__class__ = StreamClusterPipeline
        pipe._parent_cluster = self  # type: ignore[attr-defined]
        return pipe  # type: ignore[return-value]


class StreamClusterPipeline(ClusterPipeline):
    """A ClusterPipeline made by :meth:`StreamCluster.pipeline`."""

    _parent_cluster: StreamCluster

    def get_redis_connection(self, node: ClusterNode) -> redis.Redis:
        return self._parent_cluster.get_redis_connection(node)

    def evalsha(self, sha: str, numkeys: int, *keys_and_args: Any) -> Any:
        """Queue the script as EVAL (no NOSCRIPT on nodes that lack it)."""
        source = self._parent_cluster._script_sources.get(sha)
        if source is None:
            return self.execute_command("EVALSHA", sha, numkeys, *keys_and_args)
        return self.execute_command("EVAL", source, numkeys, *keys_and_args)


def cluster_enabled(client: redis.Redis) -> bool:
    """True when the server runs in cluster mode (INFO cluster: ``cluster_enabled:1``)."""
    return int(client.info("cluster").get("cluster_enabled", 0)) == 1


def open_client(url: str, options: Mapping[str, Any], mode: ClusterMode
                ) -> redis.Redis | StreamCluster:
    """A standalone or a cluster client for `url`, per `mode` (True, False or "auto").

    `options` are redis-py's, plus ``min_transfer_bytes_per_s`` (every client's connections
    bound each whole request and reply: ``recovery.redis_io.deadline``). "auto" asks the
    server (one INFO call on a short-lived connection). Raises redis-py's
    errors for an unreachable server or a refused login (the caller maps them), ConfigError
    for a database other than 0 on a cluster, RedisUnavailableError when the cluster's slot
    map cannot be read.
    """
    standalone = standalone_options(url, options)
    if mode is False or mode == "false":
        return redis.Redis.from_url(url, **standalone)
    if mode == "auto" and not _probe_cluster(url, standalone):
        return redis.Redis.from_url(url, **standalone)
    _check_database_zero(url)
    try:
        return cast(StreamCluster, StreamCluster.from_url(url, **cluster_options(options)))
    except RedisClusterException as exc:
        cause = _redis_cause(exc)
        if cause is not None:  # refused login, unreachable, NOPERM: mapped as usual
            raise cause from None
        raise RedisUnavailableError(
            f"cannot read the Redis Cluster's slot map from {host_port(url)} ({exc}): "
            "check redis.url, that every node runs, and redis.cluster"
        ) from None


def _redis_cause(exc: BaseException) -> redis.RedisError | None:
    """The server's or the network's error behind a RedisClusterException, if any (e.g. the
    NOPERM for CLUSTER SLOTS that redis-py reports as "Cluster mode is not enabled")."""
    seen: BaseException | None = exc.__cause__ or exc.__context__
    while seen is not None:
        if isinstance(seen, (redis.ConnectionError, redis.ResponseError)):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


def _probe_cluster(url: str, options: Mapping[str, Any]) -> bool:
    probe = redis.Redis.from_url(url, **options)
    try:
        return cluster_enabled(probe)
    except redis.ResponseError as exc:
        if "not allowed in cluster mode" in str(exc):  # SELECT <db> on a cluster node
            _check_database_zero(url)
        raise
    finally:
        probe.close()


def _check_database_zero(url: str) -> None:
    database = urlsplit(url).path.strip("/") or "0"
    if database != "0":
        raise ConfigError(
            f"redis.url names database {database}, but a Redis Cluster has only database 0: "
            f"end the URL with /0 (or set redis.cluster = false for a proxy)"
        )


def host_port(url: str) -> str:
    """host:port of a redis:// or rediss:// URL (never its password)."""
    return url.split("://", 1)[-1].split("/", 1)[0].rsplit("@", 1)[-1]


def redirected_error(exc: AskError, where: str) -> RecoveryError:
    """The error for a MOVED or ASK reply that reached the job: a standalone client
    (redis.cluster = false) talks to a cluster node."""
    kind = "MOVED" if isinstance(exc, MovedError) else "ASK"
    return RecoveryError(
        f"Redis at {where} redirected a key to another node ({kind} {exc}): it is a Redis "
        'Cluster node; set redis.cluster = "auto" or true'
    )


def node_of(client: redis.Redis | RedisCluster, key: str) -> str:
    """``host:port`` of the primary that owns `key` ("" on a standalone server)."""
    if isinstance(client, RedisCluster):
        return str(client.get_node_from_key(key).name)
    return ""


def groups_by_node(items: Sequence[T], partitions: int, node: Callable[[T], str],
                   size: Callable[[T], int]) -> list[tuple[list[T], int]]:
    """Split `items` into groups that each get a number of parts, all parts summing to
    min(`partitions`, len(`items`)), so that a part holds the items of one node only.

    With at least as many parts as nodes, each node is its own group, with parts in
    proportion to its total `size` (largest remainder first, at least one, at most one per
    item). With fewer parts than nodes, whole nodes are packed into the parts, biggest first
    onto the lightest. One node (a standalone server): one group with every part.
    """
    by_node: dict[str, list[T]] = {}
    for item in items:
        by_node.setdefault(node(item), []).append(item)
    total_parts = min(partitions, len(items))
    if total_parts <= len(by_node):
        return _pack_nodes(by_node, total_parts, size)
    shares = dict.fromkeys(by_node, 1)
    weight = {n: sum(size(i) for i in group) or 1 for n, group in by_node.items()}
    for _ in range(total_parts - len(by_node)):
        open_nodes = [n for n in by_node if shares[n] < len(by_node[n])]
        best = max(open_nodes, key=lambda n: (weight[n] / shares[n], n))
        shares[best] += 1
    return [(by_node[n], shares[n]) for n in sorted(by_node)]


def _pack_nodes(by_node: dict[str, list[T]], parts: int, size: Callable[[T], int]
                ) -> list[tuple[list[T], int]]:
    weight = {n: sum(size(i) for i in group) for n, group in by_node.items()}
    packed: list[list[T]] = [[] for _ in range(parts)]
    for name, part in biggest_first(sorted(by_node), weight.__getitem__, parts):
        packed[part] += by_node[name]
    return [(group, 1) for group in packed if group]


def biggest_first(items: list[T], weight: Callable[[T], int], bins: int
                  ) -> list[tuple[T, int]]:
    """Greedy packing: each item, heaviest first (ties in the order given), with the bin
    (0 to `bins` - 1) that was the lightest when it came. Returns (item, bin) pairs in
    that order (``spread`` with one bin per item)."""
    return spread(items, [1] * len(items), weight, bins)


def spread(items: Sequence[T], parts: Sequence[int], weight: Callable[[T], int], bins: int
           ) -> list[tuple[T, int]]:
    """Greedy packing of items that may take several bins: each item (heaviest share first,
    ties in the order given) goes to its `parts` (at most `bins`) lightest bins, one share
    of its weight each. Returns (item, bin) pairs, an item's bins in ascending order.
    With every part 1 it is :func:`biggest_first`."""
    load: list[tuple[float, int]] = [(0.0, b) for b in range(bins)]
    placed: list[tuple[T, int]] = []
    order = sorted(range(len(items)),
                   key=lambda i: -weight(items[i]) / min(parts[i], bins))
    for i in order:
        k = min(parts[i], bins)
        share = weight(items[i]) / k
        taken = [heapq.heappop(load) for _ in range(k)]
        placed += [(items[i], b) for _, b in sorted(taken, key=lambda t: t[1])]
        for used, b in taken:
            heapq.heappush(load, (used + share, b))
    return placed
