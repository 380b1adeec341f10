"""The console's state as ``serve`` builds it from the settings
(recovery.console.serve.console_state): its own audit stream is never a source, even when
a pattern selects it. Against a real Redis."""

from __future__ import annotations

from recovery.console.serve import ServeOptions, console_state
from recovery.console.users import load_users
from recovery.settings.model import load_settings
from recovery.testing.local_redis import LocalServer
from tests.support.console_tools import USERS, seed


def test_the_audit_stream_is_no_source_even_when_a_pattern_selects_it(
        redis_server: LocalServer) -> None:
    r = redis_server.client()
    seed(r, "orders", [{b"n": b"0"}])
    r.xadd("recovery:console:audit", {"at": "earlier"})
    settings = load_settings(None, [f"redis.url={redis_server.url}", "streams.match=*"])
    state = console_state(settings, load_users(USERS), ServeOptions())
    try:
        assert [s for s, _ in state.pairs()] == ["orders"]
    finally:
        state.close()
