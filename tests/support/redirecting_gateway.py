"""A misbehaving Pushgateway (ATTACKS.md, "Dependencies that misbehave"): it accepts a PUT
(202, as the real one) and answers every POST with a redirect (302) to another server, which
records each request's headers and answers 200. urllib follows a redirected POST as a GET to
the other host, with every header of the original request. In this process, on threads."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class RedirectingGateway:
    """`seen`: (method, path, headers) of each request the other host received;
    `redirected`: how many POSTs the gateway redirected."""

    seen: list[tuple[str, str, dict[str, str]]] = field(default_factory=list)
    redirected: int = 0
    _servers: list[ThreadingHTTPServer] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._servers[0].server_address[1]}"

    def __enter__(self) -> RedirectingGateway:
        owner = self

        class Other(BaseHTTPRequestHandler):
            def _record(self) -> None:
                owner.seen.append((self.command, self.path, dict(self.headers.items())))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            do_GET = do_POST = do_PUT = _record

            def log_message(self, *args: object) -> None:
                pass

        other = ThreadingHTTPServer(("127.0.0.1", 0), Other)

        class Gateway(BaseHTTPRequestHandler):
            def _body(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))

            def do_PUT(self) -> None:
                self._body()
                self.send_response(202)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def do_POST(self) -> None:
                self._body()
                owner.redirected += 1
                self.send_response(302)
                self.send_header("Location",
                                 f"http://127.0.0.1:{other.server_address[1]}{self.path}")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        gateway = ThreadingHTTPServer(("127.0.0.1", 0), Gateway)
        self._servers = [gateway, other]
        for server in self._servers:
            threading.Thread(target=server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        for server in self._servers:
            server.shutdown()
            server.server_close()
