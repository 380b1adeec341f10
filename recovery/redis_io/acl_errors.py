"""Which command an ACL refusal is about, including refusals inside the job's Lua scripts.

Redis checks ACLs for every ``redis.call`` in a script. The refusal comes back as a plain
error, not as NOPERM, and Redis 7.0 does not even name the command:

- Redis 6.2: ``ERR Error running script (call to f_<sha>): @user_script:<line>: ... The
  user executing the script can't run this command or subcommand``
- Redis 7.0: ``The user executing the script can't run this command or subcommand script:
  <sha>, on @user_script:<line>.``
- Valkey 8 (and Redis 7.2+): ``ACL failure in script: User u has no permissions to run the
  'xadd' command script: <sha>, on @user_script:<line>.``
- a refused key: ``... can't access at least one of the keys ...`` / ``No permissions to
  access a key ...``

The script and line name the command: the line of ``recovery/redis_io/lua/<script>.lua`` with that
SHA1 holds the ``redis.call('XADD', ...)`` that was refused.
"""

from __future__ import annotations

import hashlib
import re
from functools import lru_cache
from importlib import resources

DENIED_COMMAND = re.compile(r"run the '([\w|]+)' command")
SCRIPT_PLACE = re.compile(  # 7.0+: "script: <sha>, on ..."; 6.2: "(call to f_<sha>): ..."
    r"(?:script: |call to f_)([0-9a-f]{40})(?:, on |\): )@user_script:(\d+)")
SCRIPT_DENIALS = ("can't run this command", "ACL failure in script",
                  "can't access at least one of the keys")
REDIS_CALL = re.compile(r"redis\.call\('(\w+)'(?:,\s*'([A-Z]+)')?")


def is_script_denial(text: str) -> bool:
    """True when `text` is an ACL refusal of a command or key inside a Lua script."""
    return SCRIPT_PLACE.search(text) is not None and any(d in text for d in SCRIPT_DENIALS)


def denied_command(text: str) -> str | None:
    """The refused command in ACL rule form (``xadd``, ``xgroup|delconsumer``), from a NOPERM
    reply or a refusal inside one of the job's scripts; None when a key was refused or the
    command cannot be told."""
    named = DENIED_COMMAND.search(text)
    if named:
        return named.group(1).lower()
    place = SCRIPT_PLACE.search(text)
    if place is None or "can't run this command" not in text:
        return None
    line = _script_lines().get(place.group(1), {}).get(int(place.group(2)), "")
    call = REDIS_CALL.search(line)
    if call is None:
        return None
    return "|".join(part.lower() for part in call.groups() if part)


@lru_cache(maxsize=1)
def _script_lines() -> dict[str, dict[int, str]]:
    """SHA1 of each of the job's scripts -> its source lines, numbered from 1."""
    scripts: dict[str, dict[int, str]] = {}
    for path in resources.files("recovery.redis_io").joinpath("lua").iterdir():
        if path.name.endswith(".lua"):
            source = path.read_text("utf-8")
            sha = hashlib.sha1(source.encode("utf-8")).hexdigest()
            scripts[sha] = dict(enumerate(source.splitlines(), start=1))
    return scripts
