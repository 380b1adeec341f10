"""The console's login session: a signed cookie, its CSRF token, and the cookie's settings.

A session is ``<user>|<role>|<csrf>|<expires s>`` signed with HMAC-SHA256 under a key made
at start (so logins end when the console restarts, and no key is stored anywhere). The
cookie is HttpOnly, SameSite=Strict, Path=/, Secure when the request came over HTTPS
(directly, or through a proxy that says so and uvicorn is told to trust); it holds no
secret of the user's. Every POST carries the session's CSRF token in a form field (or the
``X-CSRF-Token`` header), compared in constant time.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import time
from dataclasses import dataclass

from starlette.responses import Response

from recovery.console.users import Role

COOKIE = "rsr_console"
SESSION_S = 8 * 3600  # a login lasts a working day at most
CSRF_FIELD = "csrf_token"
CSRF_HEADER = "x-csrf-token"


@dataclass(frozen=True)
class Session:
    user: str
    role: Role
    csrf: str
    expires_s: int

    @property
    def may_act(self) -> bool:
        return self.role is Role.OPERATOR

    def csrf_ok(self, given: str | None) -> bool:
        return bool(given) and hmac.compare_digest(str(given).encode(), self.csrf.encode())


class SessionSigner:
    """Makes and checks session cookies with a key of its own (random unless given)."""

    def __init__(self, key: bytes | None = None) -> None:
        self._key = key or secrets.token_bytes(32)
        self._revoked: dict[str, int] = {}  # signature -> expiry (s): logged out before it

    def revoke(self, cookie: str | None, now_s: float | None = None) -> None:
        """End the session `cookie` holds (a logout): it is refused from now on, even if a
        copy of the cookie was kept. Expired revocations are forgotten."""
        session = self.read(cookie, now_s)
        if session is None or cookie is None:
            return
        now = time.time() if now_s is None else now_s
        self._revoked = {s: e for s, e in self._revoked.items() if e > now}
        self._revoked[cookie.rpartition(".")[2]] = session.expires_s

    def new(self, user: str, role: Role, now_s: float | None = None) -> tuple[Session, str]:
        """A fresh session for `user` and its cookie value."""
        expires = int((time.time() if now_s is None else now_s) + SESSION_S)
        session = Session(user, role, secrets.token_urlsafe(24), expires)
        payload = "|".join((user, role.value, session.csrf, str(expires))).encode()
        body = base64.urlsafe_b64encode(payload).decode()
        return session, f"{body}.{self._sign(body)}"

    def read(self, cookie: str | None, now_s: float | None = None) -> Session | None:
        """The session a cookie holds; None when absent, forged, malformed or expired."""
        if not cookie or "." not in cookie:
            return None
        body, _, signature = cookie.rpartition(".")
        if not hmac.compare_digest(signature.encode(), self._sign(body).encode()) \
                or signature in self._revoked:
            return None
        try:
            user, role, csrf, expires = base64.urlsafe_b64decode(body).decode().rsplit("|", 3)
            session = Session(user, Role(role), csrf, int(expires))
        except ValueError:
            return None
        return session if session.expires_s > (time.time() if now_s is None else now_s) \
            else None

    def _sign(self, body: str) -> str:
        return hmac.new(self._key, body.encode(), hashlib.sha256).hexdigest()


def set_cookie(response: Response, name: str, value: str, https: bool,
               max_age_s: int = SESSION_S) -> None:
    """Set a console cookie: HttpOnly, SameSite=Strict, Path=/, Secure over HTTPS."""
    response.set_cookie(name, value, max_age=max_age_s, path="/", secure=https, httponly=True,
                        samesite="strict")
