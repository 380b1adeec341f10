"""The least-privilege users of docs/ACL.md, read from the document itself, for tests that
run the job as those users (tests/integration/test_acl.py, tests/unit/driver/test_split.py)."""

from __future__ import annotations

import re
from pathlib import Path

from redis import Redis

from tests.support.servers import ACL_LOG_SUBCOMMANDS, has

ACL_DOC = Path(__file__).resolve().parents[2] / "docs" / "ACL.md"
PASSWORD = "acl-test-9d41"
DOC_RULE = re.compile(r"<!-- acl-rule: ([\w-]+) -->\s*```\n(.*?)```", re.DOTALL)


def documented_rules() -> dict[str, list[list[str]]]:
    """user -> the argument lists of its documented ``ACL SETUSER <user> ...`` lines."""
    rules: dict[str, list[list[str]]] = {}
    for name, block in DOC_RULE.findall(ACL_DOC.read_text()):
        lines = [line.split() for line in block.strip().splitlines()]
        assert all(line[:3] == ["ACL", "SETUSER", name] for line in lines), block
        rules[name] = [[t.replace(">CHANGE-ME", f">{PASSWORD}") for t in line[2:]]
                       for line in lines]
    assert set(rules) == {"recovery", "redrive", "console-read", "console-operator"}
    return rules


def create_users(client: Redis, without: str | None = None) -> None:
    """The documented users, leaving out the documented lines that hold the word `without`;
    the ACL LOG emptied."""
    for lines in documented_rules().values():
        for args in lines:
            if without is None or without not in args:
                client.execute_command("ACL", "SETUSER", *args)
    client.execute_command("ACL", "LOG", "RESET")


def refusals(client: Redis) -> set[tuple[str, str, str]]:
    """(user, reason, object) of every ACL LOG entry."""
    return {(e["username"], e["reason"], e["object"]) for e in client.acl_log()}


def refused_object(client: Redis, command: str, subcommand: str) -> str:
    """How the ACL LOG of `client`'s server names a refused subcommand (ACL_LOG_SUBCOMMANDS)."""
    return f"{command}|{subcommand}" if has(client, ACL_LOG_SUBCOMMANDS) else command


def setinfo_refusal(client: Redis, user: str = "recovery") -> tuple[str, str, str]:
    """redis-py's CLIENT SETINFO on connecting, refused by the documented rules (it goes on
    without), as the ACL LOG shows it."""
    return (user, "command", refused_object(client, "client", "setinfo"))
