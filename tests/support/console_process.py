"""The console as a user starts it: ``python -m recovery console`` (the installed command's
code) in a process of its own, talked to over HTTP with httpx, logged in as a browser does
(the CSRF token from the form). For the attack tests, which check Redis, not the pages."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import httpx

from recovery.testing.local_redis import free_port

TOKEN = "operator-token-for-attacks"
CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')


@dataclass
class ConsoleProcess:
    """A running (or already exited) console: its process, URL, and stderr once it ended."""

    process: subprocess.Popen[str]
    url: str
    listening: bool
    stderr: str | None = None

    def ended(self, timeout_s: float = 30) -> tuple[int, str]:
        """The exit code and stderr once it stops (by itself, or after a signal)."""
        if self.stderr is None:
            _, self.stderr = self.process.communicate(timeout=timeout_s)
        return self.process.returncode, self.stderr

    def session(self, user: str = "operator", secret: str = TOKEN) -> tuple[httpx.Client, str]:
        """An httpx client logged in as `user`, and its session's CSRF token."""
        client = httpx.Client(base_url=self.url, follow_redirects=False, timeout=60)
        form = client.get("/login")
        found = CSRF.search(form.text)
        assert found, form.text
        reply = client.post("/login", data={"csrf_token": found.group(1), "user": user,
                                            "secret": secret})
        assert reply.status_code == 303, reply.text
        token = CSRF.search(client.get("/").text)
        assert token, "the overview has no CSRF token"
        return client, token.group(1)


@contextmanager
def console_process(args: list[str], env: dict[str, str] | None = None,
                    wait_s: float = 30) -> Iterator[ConsoleProcess]:
    """Start the console with `args` (after ``console --port <free>``) and the operator token
    in its environment; yields once it listens or has exited; SIGINT (then SIGKILL) at the
    end."""
    port = free_port()
    environment = {**os.environ, "RECOVERY_CONSOLE_TOKEN": TOKEN, **(env or {})}
    process = subprocess.Popen([sys.executable, "-m", "recovery", "console", "--port",
                                str(port), *args], env=environment, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    listening = False
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline and process.poll() is None and not listening:
        try:
            httpx.get(f"{url}/login", timeout=2)
            listening = True
        except httpx.TransportError:
            time.sleep(0.2)
    console = ConsoleProcess(process, url, listening)
    try:
        yield console
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
            try:
                process.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
        console.ended()
