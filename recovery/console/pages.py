"""The console's pages (GET), and logging in and out. Every page needs a login
(:func:`recovery.console.guard.page`); the login form carries a CSRF token of its own (a
random value in a short-lived cookie and in the form, compared)."""

from __future__ import annotations

import hmac
import secrets
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.templating import Jinja2Templates

from recovery.console.audit import newest
from recovery.console.browse import read_page
from recovery.console.guard import page, state_of
from recovery.console.letters import Letter
from recovery.console.overview import overview
from recovery.console.queries import (
    BadQuery,
    UnknownStream,
    cursor,
    entry_id,
    letter_filter,
    newest_first,
    stream_key,
)
from recovery.console.sessions import COOKIE, CSRF_FIELD, Session, set_cookie
from recovery.console.state import ConsoleState
from recovery.console.users import authenticate
from recovery.redis_io.letters import letters_by_id

LOGIN_COOKIE = "rsr_console_login"


def render(request: Request, name: str, session: Session | None, status: int = 200,
           **context: Any) -> Response:
    templates: Jinja2Templates = request.app.state.templates
    state = state_of(request)
    return templates.TemplateResponse(request, name, {
        "session": session, "csrf": session.csrf if session else "", "csrf_field": CSRF_FIELD,
        "server": state.server, **context}, status_code=status)


def problem(request: Request, session: Session, exc: Exception) -> Response:
    """A 400 page for a bad parameter, a 404 one for a stream outside the selection."""
    if isinstance(exc, UnknownStream):
        return render(request, "problem.html", session, 404,
                      message="no such dead-letter stream among the selected streams")
    return render(request, "problem.html", session, 400, message=str(exc))


async def login_form(request: Request) -> Response:
    token = secrets.token_urlsafe(24)
    response = render(request, "login.html", None, login_token=token, failed=False)
    set_cookie(response, LOGIN_COOKIE, token, _https(request), max_age_s=900)
    return response


async def login(request: Request) -> Response:
    """Check the login CSRF token, then the credentials; set the session cookie."""
    form = await request.form(max_files=0, max_fields=10)
    sent, kept = str(form.get(CSRF_FIELD, "")), request.cookies.get(LOGIN_COOKIE, "")
    if not sent or not kept or not hmac.compare_digest(sent.encode(), kept.encode()):
        return PlainTextResponse("missing or wrong CSRF token: reload the login page",
                                 status_code=403)
    state = state_of(request)
    name = str(form.get("user", ""))[:200]
    if state.logins.blocked(name):
        return PlainTextResponse("too many failed logins for this user: wait five minutes",
                                 status_code=429)
    user = await run_in_threadpool(authenticate, state.users, name,
                                   str(form.get("secret", ""))[:1000])  # PBKDF2: a thread
    if user is None:
        state.logins.failed(name)
        response = render(request, "login.html", None, 401, login_token=kept, failed=True)
        return response
    _, cookie = state.signer.new(user.name, user.role)
    response = RedirectResponse("/", status_code=303)
    set_cookie(response, COOKIE, cookie, _https(request))
    response.delete_cookie(LOGIN_COOKIE, path="/")
    return response


def _https(request: Request) -> bool:
    return request.url.scheme == "https"


@page
def home(request: Request, state: ConsoleState, session: Session) -> Response:
    return render(request, "overview.html", session, view=overview(state))


@page
def browse(request: Request, state: ConsoleState, session: Session) -> Response:
    params = request.query_params
    try:
        key = stream_key(state, params)
        flt, newest, after = letter_filter(params), newest_first(params), cursor(params)
    except (BadQuery, UnknownStream) as exc:
        return problem(request, session, exc)
    with state.conn.errors(key):
        found = read_page(state.conn.client, key, flt, after, newest)
    return render(request, "browse.html", session, key=key, flt=flt, page=found,
                  order="newest" if newest else "oldest", after=after,
                  sources=state.sources_of(key))


@page
def letter(request: Request, state: ConsoleState, session: Session) -> Response:
    params = request.query_params
    try:
        key = stream_key(state, params)
        wanted = entry_id(params.get("id", ""))
    except (BadQuery, UnknownStream) as exc:
        return problem(request, session, exc)
    with state.conn.errors(key):
        flat = letters_by_id(state.conn.client, key, [wanted]).get(wanted)
    if flat is None:
        return render(request, "problem.html", session, 404,
                      message=f"letter {wanted} is no longer in {key} (redriven or deleted)")
    return render(request, "letter.html", session, key=key, letter=Letter.of(wanted, flat))


@page
def audit(request: Request, state: ConsoleState, session: Session) -> Response:
    with state.conn.errors(state.audit_key):
        records = newest(state.conn.client, state.audit_key)
    return render(request, "audit.html", session, records=records, key=state.audit_key)


@page
def task(request: Request, state: ConsoleState, session: Session) -> Response:
    raw = request.query_params.get("id", "")
    found = state.tasks.get(int(raw)) if raw.isdigit() and len(raw) < 10 else None
    if found is None:
        return render(request, "problem.html", session, 404, message="no such task")
    return render(request, "task.html", session, task=found, tasks=state.tasks.recent())
