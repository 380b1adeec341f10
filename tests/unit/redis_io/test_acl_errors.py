"""Which command an ACL refusal is about (recovery.redis_io.acl_errors), from each server's
shape of the refusal: a NOPERM naming the command, Redis 6.2's and 7.0's refusals inside a
script (which name only the script's SHA1 and line: the line of the job's own Lua file
says), Valkey's, and a refused key (no command to name). Pure: the texts as the servers
write them (a refusal from a real server: tests/integration/attacks/test_attack_hold.py)."""

from __future__ import annotations

import hashlib
from importlib import resources

import pytest

from recovery.redis_io.acl_errors import denied_command, is_script_denial


def place_of(script: str, call: str) -> tuple[str, int]:
    """SHA1 of the job's `script` (``dead_letter.lua``) and the line of its first `call`."""
    source = resources.files("recovery.redis_io").joinpath("lua", script).read_text("utf-8")
    line = next(n for n, text in enumerate(source.splitlines(), start=1) if call in text)
    return hashlib.sha1(source.encode("utf-8")).hexdigest(), line


SHA, LINE = place_of("dead_letter.lua", "redis.call('XADD'")
CANT_RUN = "The user executing the script can't run this command or subcommand"


@pytest.mark.parametrize(("text", "command", "in_script"), [
    ("NOPERM User recovery has no permissions to run the 'xgroup|delconsumer' command",
     "xgroup|delconsumer", False),
    (f"ERR Error running script (call to f_{SHA}): @user_script:{LINE}: @user_script: "
     f"{LINE}: {CANT_RUN}", "xadd", True),  # Redis 6.2
    (f"{CANT_RUN} script: {SHA}, on @user_script:{LINE}.", "xadd", True),  # Redis 7.0
    (f"ACL failure in script: User recovery has no permissions to run the 'xadd' command "
     f"script: {SHA}, on @user_script:{LINE}.", "xadd", True),  # Valkey 8, Redis 7.2+
    (f"{CANT_RUN} script: {'0' * 40}, on @user_script:{LINE}.", None, True),  # not the job's
    (f"The user executing the script can't access at least one of the keys mentioned in the "
     f"command script: {SHA}, on @user_script:{LINE}.", None, True),  # a key, no command
    ("WRONGTYPE Operation against a key holding the wrong kind of value", None, False),
])
def test_the_refused_command_is_named_from_every_servers_shape(text: str, command: str | None,
                                                               in_script: bool) -> None:
    """Catches a shape read as no refusal (the job then names no grant to add), a script's
    line looked up in the wrong file, or a key refusal blamed on a command."""
    assert denied_command(text) == command
    assert is_script_denial(text) is in_script
