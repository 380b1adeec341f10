"""The console's ASGI application (Starlette): routes, templates (Jinja2, autoescaped, from
the package) and static files (from the package: no CDN, no build step)."""

from __future__ import annotations

from datetime import UTC, datetime
from importlib import resources
from pathlib import Path

from jinja2 import Environment, FileSystemLoader
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from recovery.console import act, links, pages
from recovery.console.guard import BodyLimit, SecurityHeaders, session_of
from recovery.console.state import ConsoleState
from recovery.errors import RecoveryError

HERE = Path(str(resources.files("recovery.console")))


def age(seconds: float | None) -> str:
    """``93784.0`` -> ``1 d 2 h``: the two largest units of a duration in seconds."""
    if seconds is None:
        return "-"
    left, parts = int(seconds), list[str]()
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60), ("s", 1)):
        if left >= size or (unit == "s" and not parts):
            parts.append(f"{left // size} {unit}")
            left %= size
    return " ".join(parts[:2])


def at(epoch_s: float | None) -> str:
    """Epoch seconds as ISO 8601 UTC to the second (``-`` for None)."""
    if epoch_s is None:
        return "-"
    return datetime.fromtimestamp(epoch_s, tz=UTC).isoformat(timespec="seconds")


def templates() -> Jinja2Templates:
    env = Environment(loader=FileSystemLoader(str(HERE / "templates")), autoescape=True)
    found = Jinja2Templates(env=env)
    found.env.filters.update(age=age, at=at)
    return found


async def redis_failed(request: Request, exc: Exception) -> Response:
    """A Redis failure (unreachable, refused, a key of another type): its one line, 503."""
    return pages.render(request, "problem.html", session_of(request), 503,
                        message=str(exc))


def console_app(state: ConsoleState) -> Starlette:
    """The application over `state` (its Redis client and users)."""
    routes = [Route("/login", pages.login_form, methods=["GET"]),
              Route("/login", pages.login, methods=["POST"]),
              Route("/", pages.home), Route("/browse", pages.browse),
              Route("/letter", pages.letter), Route("/audit", pages.audit),
              Route("/task", pages.task), Route(links.ROUTE, links.stream_page),
              *(Route(path, handler, methods=["POST"]) for path, handler in act.ROUTES.items()),
              Mount("/static", StaticFiles(directory=str(HERE / "static")), name="static")]
    app = Starlette(routes=routes, middleware=[Middleware(SecurityHeaders), Middleware(BodyLimit)],
                    exception_handlers={RecoveryError: redis_failed})
    app.state.console = state
    app.state.templates = templates()
    return app
