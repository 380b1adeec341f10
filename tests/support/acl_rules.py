"""The least-privilege users of docs/ACL.md, read from the document itself, for tests that
run the job as those users (tests/test_acl.py, tests/test_split.py)."""

from __future__ import annotations

import re
from pathlib import Path

from redis import Redis

ACL_DOC = Path(__file__).resolve().parents[2] / "docs" / "ACL.md"
PASSWORD = "acl-test-9d41"
DOC_RULE = re.compile(r"<!-- acl-rule: (\w+) -->\s*```\n(.*?)```", re.DOTALL)


def documented_rules() -> dict[str, list[list[str]]]:
    """user -> the argument lists of its documented ``ACL SETUSER <user> ...`` lines."""
    rules: dict[str, list[list[str]]] = {}
    for name, block in DOC_RULE.findall(ACL_DOC.read_text()):
        lines = [line.split() for line in block.strip().splitlines()]
        assert all(line[:3] == ["ACL", "SETUSER", name] for line in lines), block
        rules[name] = [[t.replace(">CHANGE-ME", f">{PASSWORD}") for t in line[2:]]
                       for line in lines]
    assert set(rules) == {"recovery", "redrive"}
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


def setinfo_refusal(client: Redis) -> tuple[str, str, str]:
    """redis-py's CLIENT SETINFO on connecting, refused by the documented rules (it goes on
    without): Redis 6.2's ACL LOG names only the command."""
    old = client.info("server")["redis_version"].startswith("6.")
    return ("recovery", "command", "client" if old else "client|setinfo")
