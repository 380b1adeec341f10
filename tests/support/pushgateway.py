"""A throwaway Prometheus Pushgateway (Debian's ``prometheus-pushgateway``) on a free port,
as recovery/testing/local_redis.py starts Redis: in memory only, stopped by ``stop()``;
optionally behind basic auth. Read back through its own /metrics."""

from __future__ import annotations

import base64
import shutil
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
import warnings
from dataclasses import dataclass, field
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from recovery.metrics.families import (
    RunFacts,
    attempt_registry,
    run_registry,
    success_registry,
)
from recovery.testing.local_redis import free_port

BINARY = shutil.which("prometheus-pushgateway") or "/usr/bin/prometheus-pushgateway"
START_TIMEOUT_S = 10.0
Series = dict[tuple[tuple[str, str], ...], float]  # sorted label pairs -> value


def bcrypt_hash(password: str) -> str:
    """The bcrypt hash the Pushgateway's web config wants (glibc's crypt, Python 3.11)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        import crypt
        return crypt.crypt(password, crypt.mksalt(crypt.METHOD_BLOWFISH))


@dataclass
class LocalPushgateway:
    """A Pushgateway process we started; with `users` (name -> password), basic auth."""

    users: dict[str, str] = field(default_factory=dict)
    port: int = field(default_factory=free_port)
    directory: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="pushgw-")))
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> LocalPushgateway:
        if not Path(BINARY).exists():
            raise RuntimeError("no prometheus-pushgateway: apt-get install "
                               "prometheus-pushgateway (.ci/run does)")
        cmd = [BINARY, f"--web.listen-address=127.0.0.1:{self.port}", "--persistence.file=",
               "--log.level=warn"]
        if self.users:
            config = self.directory / "web.yml"
            config.write_text("basic_auth_users:\n" + "".join(
                f"  {name}: '{bcrypt_hash(pw)}'\n" for name, pw in self.users.items()))
            cmd.append(f"--web.config.file={config}")
        with open(self.directory / "log", "wb") as log:
            self.process = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"pushgateway exited: {(self.directory / 'log').read_text()}")
            try:
                urllib.request.urlopen(f"{self.url}/-/ready", timeout=1)
                return self
            except urllib.error.HTTPError:
                return self  # answering (401 behind auth): ready
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"pushgateway on port {self.port} not ready")

    def metrics_text(self) -> str:
        request = urllib.request.Request(f"{self.url}/metrics")
        if self.users:
            name, password = next(iter(self.users.items()))
            token = base64.b64encode(f"{name}:{password}".encode()).decode()
            request.add_header("Authorization", f"Basic {token}")
        with urllib.request.urlopen(request, timeout=5) as reply:
            return str(reply.read().decode())

    def series(self, name: str) -> Series:
        """Every sample of metric `name` now on the Pushgateway: label pairs -> value."""
        found: Series = {}
        for family in text_string_to_metric_families(self.metrics_text()):
            for sample in family.samples:
                if sample.name == name:
                    found[tuple(sorted(sample.labels.items()))] = sample.value
        return found

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=10)
        shutil.rmtree(self.directory, ignore_errors=True)

    def __enter__(self) -> LocalPushgateway:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def pushed_names() -> set[str]:
    """Every metric name a job pushes (the families of a run, a success and an attempt)."""
    registries = [run_registry(RunFacts("ok", 0, 0.0, 1.0), 10), success_registry(0.0),
                  attempt_registry(0.0, 0, 1)]
    return {family.name for registry in registries for family in registry.collect()}


def pushed(gateway: LocalPushgateway, name: str, kind: str = "recover") -> dict[str, float]:
    """`name`'s samples of the default grouping key, by their labels other than the key's,
    as ``label=value,...`` text."""
    key = {("job", "redis_stream_recovery"), ("instance", "default"), ("kind", kind)}
    found = {}
    for pairs, value in gateway.series(name).items():
        if key <= set(pairs):
            found[",".join(f"{k}={v}" for k, v in pairs if (k, v) not in key)] = value
    return found
