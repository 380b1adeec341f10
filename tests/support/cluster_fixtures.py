"""A real Redis Cluster for tests: three primaries and one replica, on loopback ports.

Started with ``redis-server --cluster-enabled yes`` and joined with ``redis-cli --cluster
create`` / ``add-node --cluster-slave``, exactly as an operator would. The first primary
(`primaries[0]`) has the replica. With `tls`, every node speaks TLS only, to clients and on
the cluster bus, and asks clients for a certificate.
"""

from __future__ import annotations

import random
import socket
import subprocess
import time
from dataclasses import dataclass, field

from redis.cluster import RedisCluster

from recovery.testing.local_redis import LocalServer, server_binary
from tests.support.tls_fixtures import TlsFiles, tls_client_options, tls_server_args

NODE_TIMEOUT_MS = 2000


def cluster_port() -> int:
    """A free port whose cluster bus port (+10000) is free too (so at most 55535)."""
    while True:
        port = random.randint(20000, 45000)
        if _free(port) and _free(port + 10000):
            return port


def _free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def cluster_node(tls: TlsFiles | None = None, flavor: str = "redis") -> LocalServer:
    """One cluster-enabled redis-server of `flavor` (not yet part of a cluster)."""
    binary = server_binary(flavor)
    if binary is None:
        raise RuntimeError("no redis-server on the PATH: apt-get install redis-server")
    port = cluster_port()
    args: tuple[str, ...] = (
        "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
        "--cluster-node-timeout", str(NODE_TIMEOUT_MS), "--appendonly", "no")
    if tls is not None:
        args += (*tls_server_args(tls, port), "--tls-cluster", "yes", "--tls-replication", "yes")
    options = tls_client_options(tls) if tls is not None else {}
    return LocalServer(binary, port=port, args=args, client_options=options).start()


def redis_cli(*args: str, tls: TlsFiles | None = None, timeout_s: float = 60) -> str:
    """Run redis-cli (over TLS with the client certificate when `tls`); raise on failure."""
    tls_args = ["--tls", "--cacert", str(tls.ca), "--cert", str(tls.client_cert),
                "--key", str(tls.client_key)] if tls is not None else []
    proc = subprocess.run(["redis-cli", *tls_args, *args], capture_output=True, text=True,
                          timeout=timeout_s, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"redis-cli {' '.join(args)} failed: {proc.stdout}{proc.stderr}")
    return proc.stdout


@dataclass
class LocalCluster:
    """Three primaries (16384 slots spread by redis-cli) and a replica of the first.
    `flavors`: the servers of the three primaries (mixed: a cluster in a rolling upgrade);
    the first owns slot 0, so redis-py's default node is of the first flavor."""

    tls: TlsFiles | None = None
    with_replica: bool = True
    flavors: tuple[str, str, str] = ("redis", "redis", "redis")
    primaries: list[LocalServer] = field(default_factory=list)
    replica: LocalServer | None = None

    @property
    def nodes(self) -> list[LocalServer]:
        return [*self.primaries, *([self.replica] if self.replica else [])]

    @property
    def url(self) -> str:
        """A seed URL: any one node; the client discovers the rest."""
        return self.primaries[0].url

    def start(self) -> LocalCluster:
        self.primaries = [cluster_node(self.tls, flavor) for flavor in self.flavors]
        redis_cli("--cluster", "create", *(self._addr(n) for n in self.primaries),
                  "--cluster-yes", tls=self.tls)
        if self.with_replica:
            self.replica = cluster_node(self.tls)
            redis_cli("--cluster", "add-node", self._addr(self.replica),
                      self._addr(self.primaries[0]), "--cluster-slave",
                      "--cluster-master-id", self.node_id(self.primaries[0]), tls=self.tls)
        self.wait_healthy()
        return self

    @staticmethod
    def _addr(node: LocalServer) -> str:
        return f"127.0.0.1:{node.port}"

    @staticmethod
    def node_id(node: LocalServer) -> str:
        return str(node.client().execute_command("CLUSTER MYID").decode())

    def wait_healthy(self, timeout_s: float = 60) -> None:
        """Until every node says cluster_state:ok, knows every node, and replicas are synced."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if all(self._healthy(n) for n in self.nodes):
                return
            time.sleep(0.1)
        states = {n.port: n.client().cluster("info") for n in self.nodes}
        raise RuntimeError(f"cluster not healthy in {timeout_s}s: {states}")

    def _healthy(self, node: LocalServer) -> bool:
        client = node.client()
        info = client.cluster("info")
        if info.get("cluster_state") != "ok" or int(info.get("cluster_known_nodes", 0)) != len(
                self.nodes):
            return False
        replication = client.info("replication")
        return replication.get("role") != "slave" or (
            replication.get("master_link_status") == "up"
            and replication.get("master_sync_in_progress") == 0)

    def client(self) -> RedisCluster:
        """A plain redis-py cluster client (for seeding and checks)."""
        options = tls_client_options(self.tls) if self.tls is not None else {}
        return RedisCluster(host="127.0.0.1", port=self.primaries[0].port, **options)

    def flush(self) -> None:
        """Empty every primary (replicas follow) and forget loaded scripts."""
        for node in self.nodes:
            client = node.client()
            if client.info("replication").get("role") == "master":
                client.flushall()
                client.script_flush()

    def replicated_shard(self) -> tuple[LocalServer, LocalServer]:
        """(current primary, current replica) of the replicated shard."""
        pair = [self.primaries[0], self.replica]
        assert self.replica is not None
        roles = {n.port: n.client().info("replication")["role"] for n in pair}
        primary = next(n for n in pair if roles[n.port] == "master")
        replica = next(n for n in pair if roles[n.port] == "slave")
        return primary, replica

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()


def keys_on_every_primary(client: RedisCluster, per_node: int, prefix: str = "s"
                          ) -> list[str]:
    """Stream names spread so that each of the 3 primaries owns at least `per_node` of them."""
    chosen: dict[int, list[str]] = {}
    i = 0
    while len(chosen) < 3 or min(len(v) for v in chosen.values()) < per_node:
        name = f"{prefix}{i}"
        port = client.get_node_from_key(name).port
        if len(chosen.setdefault(port, [])) < per_node:
            chosen[port].append(name)
        i += 1
    return sorted(n for names in chosen.values() for n in names)
