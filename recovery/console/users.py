"""Who may log in to the console, and with which role. Never from the config file.

Credentials come from the environment or a file the environment (or ``--users-file``)
names; each is a line ``name:role:secret``, role ``reader`` (sees) or ``operator`` (sees and
acts), the secret a password or a token (any text, at least ``MIN_SECRET`` characters):

- ``RECOVERY_CONSOLE_USERS``: such lines (newline- or ``;``-separated);
- ``RECOVERY_CONSOLE_USERS_FILE``: a file of such lines (``#`` comments, blank lines);
- ``RECOVERY_CONSOLE_TOKEN`` / ``RECOVERY_CONSOLE_READ_TOKEN``: one token of user ``operator``
  / ``reader``.

A secret may be stored hashed: ``pbkdf2_sha256$<iterations>$<salt hex>$<hash hex>``
(:func:`hashed_secret` makes one). Secrets are compared in constant time and never shown.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

from recovery.errors import ConfigError

MIN_SECRET = 12
HASHED = "pbkdf2_sha256"
ENV_USERS, ENV_FILE = "RECOVERY_CONSOLE_USERS", "RECOVERY_CONSOLE_USERS_FILE"
ENV_TOKEN, ENV_READ_TOKEN = "RECOVERY_CONSOLE_TOKEN", "RECOVERY_CONSOLE_READ_TOKEN"


class Role(StrEnum):
    """What a user may do: a reader sees, an operator also redrives, deletes and exports."""

    READER = "reader"
    OPERATOR = "operator"


@dataclass(frozen=True)
class User:
    name: str
    role: Role
    secret: str = field(repr=False)

    def accepts(self, given: str) -> bool:
        """Whether `given` is this user's secret (constant time; hashed secrets re-hashed)."""
        if self.secret.startswith(HASHED + "$"):
            _, rounds, salt, digest = self.secret.split("$")
            mine = hashlib.pbkdf2_hmac("sha256", given.encode(), bytes.fromhex(salt),
                                       int(rounds)).hex()
            return hmac.compare_digest(mine, digest)
        return hmac.compare_digest(given.encode(), self.secret.encode())


def hashed_secret(secret: str, rounds: int = 200_000) -> str:
    """A secret as stored in a users line: PBKDF2-SHA256 with a random salt."""
    salt = secrets.token_bytes(16)
    digest = hashlib.pbkdf2_hmac("sha256", secret.encode(), salt, rounds).hex()
    return f"{HASHED}${rounds}${salt.hex()}${digest}"


def parse_user(line: str, where: str) -> User:
    """One ``name:role:secret`` line. Raises ConfigError naming `where` and the fix."""
    name, _, rest = line.strip().partition(":")
    role, _, secret = rest.partition(":")
    if not name or role not in {r.value for r in Role}:
        raise ConfigError(f"{where}: a console user is 'name:role:secret' with role reader or "
                          f"operator; fix the line of user {name or '(no name)'!r}")
    if len(secret) < MIN_SECRET and not secret.startswith(HASHED + "$"):
        raise ConfigError(f"{where}: the secret of console user {name!r} is shorter than "
                          f"{MIN_SECRET} characters: give a longer one")
    if secret.startswith(HASHED + "$") and len(secret.split("$")) != 4:
        raise ConfigError(f"{where}: the hashed secret of console user {name!r} is not "
                          f"{HASHED}$<rounds>$<salt>$<hash>: make it again")
    return User(name, Role(role), secret)


def load_users(env: Mapping[str, str] | None = None, users_file: Path | None = None
               ) -> dict[str, User]:
    """Every user the environment (default ``os.environ``) and `users_file` (default the one
    ``RECOVERY_CONSOLE_USERS_FILE`` names) define, by name. Raises ConfigError (exit 2) when
    none is defined, a line is malformed, a file cannot be read or a name comes twice."""
    env = os.environ if env is None else env
    found: list[User] = []
    for line in env.get(ENV_USERS, "").replace(";", "\n").splitlines():
        if line.strip():
            found.append(parse_user(line, ENV_USERS))
    path = users_file or (Path(env[ENV_FILE]) if env.get(ENV_FILE) else None)
    if path is not None:
        found += _file_users(path)
    for variable, name, role in ((ENV_TOKEN, "operator", "operator"),
                                 (ENV_READ_TOKEN, "reader", "reader")):
        if env.get(variable):
            found.append(parse_user(f"{name}:{role}:{env[variable]}", variable))
    users: dict[str, User] = {}
    for user in found:
        if user.name in users:
            raise ConfigError(f"console user {user.name!r} is defined twice: keep one")
        users[user.name] = user
    if not users:
        raise ConfigError(f"no console user: set {ENV_TOKEN} (and {ENV_READ_TOKEN}), "
                          f"{ENV_USERS}, or {ENV_FILE} / --users-file (lines name:role:secret)")
    return users


def _file_users(path: Path) -> list[User]:
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read the console users file {path} "
                          f"({type(exc).__name__}): fix the path or its permissions") from None
    return [parse_user(line, str(path)) for line in lines
            if line.strip() and not line.lstrip().startswith("#")]


def authenticate(users: Mapping[str, User], name: str, secret: str) -> User | None:
    """The user `name` when `secret` is theirs, else None. Every attempt costs what checking
    a hashed secret costs when any user's secret is hashed (an unknown name, or a user with a
    plain secret, also runs PBKDF2 over a hashed user's parameters), so the time taken does
    not tell which names exist."""
    user = users.get(name)
    decoy = next((u for u in users.values() if u.secret.startswith(HASHED + "$")), None)
    if user is None or not user.secret.startswith(HASHED + "$"):
        if decoy is not None:
            decoy.accepts(secret)  # its answer is ignored: only its cost counts
        else:
            hmac.compare_digest(secret.encode(), b"x" * len(secret.encode()))
    if user is None:
        return None
    return user if user.accepts(secret) else None


class FailedLogins:
    """Failed logins per user name: after `limit` within `window_s` seconds, that name is
    refused until the window passes (guessing a secret from the login form gets slow)."""

    def __init__(self, limit: int = 5, window_s: float = 300.0, names: int = 10_000) -> None:
        self.limit, self.window_s, self.names = limit, window_s, names
        self._failures: dict[str, list[float]] = {}

    def blocked(self, name: str, now_s: float | None = None) -> bool:
        now = time.monotonic() if now_s is None else now_s
        recent = [t for t in self._failures.get(name, []) if now - t < self.window_s]
        self._failures[name] = recent
        return len(recent) >= self.limit

    def failed(self, name: str, now_s: float | None = None) -> None:
        if len(self._failures) >= self.names:  # many names: forget the oldest
            self._failures.pop(next(iter(self._failures)))
        self._failures.setdefault(name, []).append(
            time.monotonic() if now_s is None else now_s)
