"""The console's rules for every request: a login for every page, the operator role for
every action, a CSRF token on every POST, and headers that keep pages out of frames, caches
and other origins' scripts.

Handlers are wrapped with :func:`page` (GET, any logged-in role) or :func:`action` (POST:
CSRF token checked first, then the role), which pass the session in. Logged out: a page
redirects to the login form, a POST answers 401. A POST without the session's CSRF token
answers 403, as does one by a reader.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable

from starlette.concurrency import run_in_threadpool
from starlette.datastructures import FormData
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from recovery.console.queries import MAX_SELECTED
from recovery.console.sessions import COOKIE, CSRF_FIELD, CSRF_HEADER, Session
from recovery.console.state import ConsoleState

# Handlers are plain functions: they talk to Redis (blocking), so they run in Starlette's
# thread pool and one slow page never holds up the others.
PageHandler = Callable[[Request, ConsoleState, Session], Response]
ActionHandler = Callable[[Request, ConsoleState, Session, FormData], Response]
HEADERS = {
    # No inline script or style, nothing from another origin: every asset ships in the package.
    b"content-security-policy": b"default-src 'self'; script-src 'self'; style-src 'self'; "
                                b"img-src 'self'; form-action 'self'; frame-ancestors 'none'; "
                                b"base-uri 'none'",
    b"x-frame-options": b"DENY",
    b"x-content-type-options": b"nosniff",
    b"referrer-policy": b"no-referrer",
    b"cache-control": b"no-store",
}
# Bytes a request body may hold: 10,000 selected IDs and a filter fit in about 0.5 MB. Without
# a cap, a form of 10,000 fields of 1 MB each (Starlette's limits) is read into memory.
MAX_BODY = 2 * 1024 * 1024


def state_of(request: Request) -> ConsoleState:
    state: ConsoleState = request.app.state.console
    return state


def session_of(request: Request) -> Session | None:
    return state_of(request).signer.read(request.cookies.get(COOKIE))


def page(handler: PageHandler) -> Callable[[Request], Awaitable[Response]]:
    """A GET page: logged out -> 303 to the login form."""

    @functools.wraps(handler)
    async def run(request: Request) -> Response:
        session = session_of(request)
        if session is None:
            return RedirectResponse("/login", status_code=303)
        return await run_in_threadpool(handler, request, state_of(request), session)

    return run


def action(handler: ActionHandler, operator: bool = True
           ) -> Callable[[Request], Awaitable[Response]]:
    """A POST: logged out -> 401; no or a wrong CSRF token -> 403; a reader where `operator`
    is needed -> 403. The form is read once and passed in."""

    @functools.wraps(handler)
    async def run(request: Request) -> Response:
        session = session_of(request)
        if session is None:
            return PlainTextResponse("log in first", status_code=401)
        form = await request.form(max_files=0, max_fields=MAX_SELECTED + 10)  # + key, token...
        token = form.get(CSRF_FIELD) or request.headers.get(CSRF_HEADER)
        if not session.csrf_ok(token if isinstance(token, str) else None):
            return PlainTextResponse("missing or wrong CSRF token: reload the page",
                                     status_code=403)
        if operator and not session.may_act:
            return PlainTextResponse("the reader role may look, not act: log in as an operator",
                                     status_code=403)
        return await run_in_threadpool(handler, request, state_of(request), session, form)

    return run


def reading(handler: ActionHandler) -> Callable[[Request], Awaitable[Response]]:
    """A POST that changes no letter (a recount): any logged-in role, CSRF token checked."""
    return action(handler, operator=False)


class SecurityHeaders:
    """ASGI middleware adding ``HEADERS`` to every response."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *HEADERS.items()]
            await send(message)

        await self.app(scope, receive, with_headers)


class BodyLimit:
    """ASGI middleware refusing (413) a request body over ``MAX_BODY`` bytes: by its declared
    Content-Length before any of it is read, else as soon as the bytes received pass it."""

    def __init__(self, app: ASGIApp, limit: int = MAX_BODY) -> None:
        self.app, self.limit = app, limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length", b"0")
        if not declared.isdigit() or int(declared) > self.limit:
            await PlainTextResponse(f"request body over {self.limit} bytes",
                                    status_code=413)(scope, receive, send)
            return
        received = 0

        async def counted() -> Message:
            nonlocal received
            message = await receive()
            received += len(message.get("body", b""))
            if received > self.limit:  # a chunked body: no Content-Length to go by
                raise HTTPException(413, f"request body over {self.limit} bytes")
            return message

        await self.app(scope, counted, send)
