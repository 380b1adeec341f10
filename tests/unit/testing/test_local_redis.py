"""Throwaway servers (recovery.testing.local_redis): a port taken by someone else's server never
passes for ours (test processes start servers side by side)."""

from __future__ import annotations

import pytest

from recovery.testing.local_redis import LocalServer, PortTaken
from tests.support.servers import start_server


def served_by(server: LocalServer) -> int:
    """The pid of the process that answers on `server`'s port."""
    return int(server.client().info("server")["process_id"])


def test_a_chosen_port_taken_meanwhile_is_chosen_again():
    with start_server("redis") as other:
        ours = LocalServer(other.binary)
        ours.port = other.port  # as if another process took it between choice and start
        with ours:
            assert ours.port != other.port
            assert ours.process is not None and served_by(ours) == ours.process.pid
            assert served_by(other) == other.process.pid


def test_a_given_port_that_is_taken_fails_instead_of_passing_for_ours():
    with start_server("redis") as other:
        ours = LocalServer(other.binary, port=other.port)
        with pytest.raises(PortTaken, match=f"port {other.port} is taken"):
            ours.start()
        assert ours.process is None


def test_restart_keeps_the_port_and_never_takes_another_server_for_ours():
    with start_server("valkey") as server:
        port, pid = server.port, served_by(server)
        server.restart()
        assert server.port == port and served_by(server) != pid
        server.kill()
        # The log still says the first process was ready: only what the new one logs counts.
        with LocalServer(server.binary, port=port) as squatter:
            with pytest.raises(PortTaken, match=f"port {port} is taken"):
                server.restart()
            assert served_by(squatter) == squatter.process.pid
