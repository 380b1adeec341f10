"""The console's address of a dead-letter stream by name, for links from outside: the
Grafana dashboard's data links (its ``stream`` label: the source stream, or the dead-letter
stream's own name where several sources share it) and the jobs' summaries (the dead-letter
stream's name). ``GET /streams/<name>`` answers 303 to the browse page of that stream's
dead-letter stream (``/browse?key=...``); a source with several (one per group) goes to the
overview, which lists them all; a name outside the selection is a 404 page.

The session cookie is SameSite=Strict, so a browser following a link from another site
(Grafana) sends none: the first request without a session answers a page that reloads the
same address from the console itself (then the cookie goes along), with ``hop=1``; a second
one without a session goes to the login form."""

from __future__ import annotations

from urllib.parse import quote

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from recovery.console.guard import session_of, state_of
from recovery.console.pages import render
from recovery.console.state import ConsoleState
from recovery.report.console_links import stream_path

ROUTE = "/streams/{name:path}"
MAX_NAME = 1000  # characters of a stream name in the address


def dead_letter_keys(state: ConsoleState, name: str) -> list[str]:
    """The dead-letter streams `name` means: itself when it is one of the selection's, else
    those of the selected source stream `name` (none: neither)."""
    pairs = state.pairs()
    if any(key == name for _, key in pairs):
        return [name]
    return list(dict.fromkeys(key for source, key in pairs if source == name))


def _resolve(state: ConsoleState, name: str) -> list[str]:
    return dead_letter_keys(state, name) if len(name) <= MAX_NAME else []


async def stream_page(request: Request) -> Response:
    """303 to the stream's browse page (or the overview, or a 404 page); logged out: one
    hop through a same-site reload, then the login form."""
    name = request.path_params["name"]
    session = session_of(request)
    if session is None:
        if request.query_params.get("hop") == "1":
            return RedirectResponse("/login", status_code=303)
        return render(request, "hop.html", None, again=stream_path(name) + "?hop=1")
    keys = await run_in_threadpool(_resolve, state_of(request), name)
    if not keys:
        return render(request, "problem.html", session, 404,
                      message="no such dead-letter stream among the selected streams")
    if len(keys) > 1:
        return RedirectResponse("/", status_code=303)
    return RedirectResponse("/browse?key=" + quote(keys[0], safe=""), status_code=303)
