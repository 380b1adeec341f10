"""Start the console: settings and users checked before anything listens, the Redis server
checked, then uvicorn serves :func:`recovery.console.app.console_app` (on 127.0.0.1 unless
told otherwise; with TLS when given a certificate and key)."""

from __future__ import annotations

import logging
import sys
from dataclasses import dataclass
from pathlib import Path

from recovery.console.app import console_app
from recovery.console.audit import check_audit_stream
from recovery.console.state import ConsoleState
from recovery.console.users import User
from recovery.settings.model import Settings, redis_params
from recovery.targets.keys import check_server

log = logging.getLogger(__name__)
LOOPBACK = ("127.0.0.1", "::1", "localhost")


@dataclass(frozen=True)
class ServeOptions:
    """Where and how the console listens. `rate`: letters per second a redrive moves at most
    (None: ``redrive.max_entries_per_s``, else no cap)."""

    host: str = "127.0.0.1"
    port: int = 8765
    audit_stream: str = "recovery:console:audit"
    rate: float | None = None
    tls_cert: Path | None = None
    tls_key: Path | None = None


def console_state(settings: Settings, users: dict[str, User], options: ServeOptions
                  ) -> ConsoleState:
    """The console's state, its Redis server checked (reachable, login, version)."""
    params = redis_params(settings)
    rate = options.rate if options.rate is not None else settings.redrive.max_entries_per_s
    state = ConsoleState(settings, params, users, options.audit_stream, rate)
    try:
        check_server(state.conn)
        with state.conn.errors(options.audit_stream):
            check_audit_stream(state.conn.client, options.audit_stream, state.pairs())
    except BaseException:
        state.close()
        raise
    return state


def serve(state: ConsoleState, options: ServeOptions) -> None:
    """Serve until interrupted (blocks)."""
    import uvicorn

    if options.host not in LOOPBACK and options.tls_cert is None:
        log.warning("the console listens on %s without TLS: logins and session cookies "
                    "cross the network in clear; give --tls-cert and --tls-key, or put it "
                    "behind a TLS proxy", options.host)
    scheme = "https" if options.tls_cert else "http"
    print(f"console: {scheme}://{options.host}:{options.port}/ (Redis at {state.server})",
          file=sys.stderr, flush=True)
    uvicorn.run(console_app(state), host=options.host, port=options.port,
                ssl_certfile=str(options.tls_cert) if options.tls_cert else None,
                ssl_keyfile=str(options.tls_key) if options.tls_key else None,
                log_level="warning", server_header=False)
