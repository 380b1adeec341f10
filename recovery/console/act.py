"""The console's actions (POST; operator role and CSRF token checked by
:func:`recovery.console.guard.action`): redrive selected letters, preview and redrive what a
filter matches (background tasks with progress), delete selected letters after a
confirmation, export selected letters as JSON lines, and recount a stream (any role). Each
is recorded in the audit log."""

from __future__ import annotations

import json
from collections.abc import Iterator

import redis
from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response, StreamingResponse

from recovery.console.audit import record
from recovery.console.guard import action, reading
from recovery.console.letters import Letter
from recovery.console.moves import delete_selected, no_retries
from recovery.console.pages import problem, render
from recovery.console.queries import BadQuery, UnknownStream, entry_ids, letter_filter, stream_key
from recovery.console.sessions import COOKIE, Session
from recovery.console.state import ConsoleState
from recovery.redis_io.commands import stream_length
from recovery.redis_io.letters import letters_by_id

ACTIONS = ("redrive", "delete", "export")


def _form(form: FormData) -> dict[str, str]:
    return {k: v for k, v in form.items() if isinstance(v, str)}


def _task_page(task_id: int) -> Response:
    return RedirectResponse(f"/task?id={task_id}", status_code=303)


def selected(request: Request, state: ConsoleState, session: Session,
                   form: FormData) -> Response:
    """``action`` redrive / delete / export of the letters ``ids`` of ``key``."""
    try:
        key = stream_key(state, _form(form))
        ids = entry_ids([str(v) for v in form.getlist("ids")])
        what = str(form.get("action", ""))
        if what not in ACTIONS:
            raise BadQuery(f"action {what[:20]!r}: use one of {', '.join(ACTIONS)}")
        if not ids:
            raise BadQuery("no letter selected: tick the letters first")
    except (BadQuery, UnknownStream) as exc:
        return problem(request, session, exc)
    if what == "redrive":
        return _task_page(state.tasks.redrive_ids(session.user, session.role.value, key, ids,
                                                  state.sources_of(key)).task_id)
    if what == "delete":
        return render(request, "confirm_delete.html", session, key=key, ids=ids)
    return _export(state, session, key, ids)


def _export(state: ConsoleState, session: Session, key: str, ids: list[str]) -> Response:
    """JSON lines of the selected letters, read and written one at a time (a letter may hold
    tens of megabytes); the audit record, written when the last line went out (or the export
    stopped), says how many."""

    def lines() -> Iterator[str]:
        written, stopped = 0, ""
        try:
            for entry_id in ids:
                with state.conn.errors(key):
                    flat = letters_by_id(state.conn.client, key, [entry_id]).get(entry_id)
                if flat is not None:
                    yield json.dumps(Letter.of(entry_id, flat).as_json_record(key)) + "\n"
                    written += 1
        except Exception as exc:
            stopped = f"; stopped: {exc}"
            raise
        finally:
            record(state.conn.client, state.audit_key, session.user, session.role.value, "export",
                   key, written, f"{len(ids)} selected, {written} still there{stopped}")

    name = "dead-letters.jsonl"
    return StreamingResponse(lines(), media_type="application/x-ndjson",
                             headers={"content-disposition": f'attachment; filename="{name}"'})


def delete(request: Request, state: ConsoleState, session: Session,
                 form: FormData) -> Response:
    """The confirmed delete: XDEL of the selected letters of selected sources (others are
    refused, as a redrive refuses them); the audit says how many."""
    try:
        key = stream_key(state, _form(form))
        ids = entry_ids([str(v) for v in form.getlist("ids")])
        if form.get("confirm") != "yes":
            raise BadQuery("the delete was not confirmed: tick the confirmation")
    except (BadQuery, UnknownStream) as exc:
        return problem(request, session, exc)
    with state.conn.errors(key):
        deleted, refused = _delete_once(state, session, key, ids)
        record(state.conn.client, state.audit_key, session.user, session.role.value, "delete", key,
               deleted, f"{len(ids)} selected, {len(refused)} refused: {' '.join(ids[:20])}")
    return render(request, "deleted.html", session, key=key, deleted=deleted,
                  selected=len(ids), refusals=refused[:20], refused=len(refused))


def _delete_once(state: ConsoleState, session: Session, key: str, ids: list[str]
                 ) -> tuple[int, list[str]]:
    """:func:`delete_selected` on a client that sends each command once: a retried XDEL
    whose first reply was lost would count 0 for letters it deleted. A connection that fails
    meanwhile is recorded as ``delete-failed`` (the letters may be gone) and raised."""
    client = no_retries(state.new_client())
    try:
        return delete_selected(client, key, ids, state.sources_of(key))
    except (redis.ConnectionError, redis.TimeoutError) as exc:
        record(state.conn.client, state.audit_key, session.user, session.role.value,
               "delete-failed", key, 0, f"{len(ids)} selected; the connection failed during "
               f"the delete ({type(exc).__name__}), so they may be gone: {' '.join(ids[:20])}")
        raise
    finally:
        client.close()


def preview(request: Request, state: ConsoleState, session: Session,
                  form: FormData) -> Response:
    """Count what the filter matches in the background; its page offers the redrive."""
    try:
        key = stream_key(state, _form(form))
        flt = letter_filter(_form(form))
    except (BadQuery, UnknownStream) as exc:
        return problem(request, session, exc)
    return _task_page(state.tasks.preview(session.user, session.role.value, key, flt).task_id)


def redrive_matching(request: Request, state: ConsoleState, session: Session,
                           form: FormData) -> Response:
    """Redrive what a finished preview counted (``preview`` is its task ID)."""
    raw = str(form.get("preview", ""))
    shown = state.tasks.get(int(raw)) if raw.isdigit() and len(raw) < 10 else None
    if shown is None or shown.kind != "preview" or shown.finished_s is None or shown.error:
        return problem(request, session, BadQuery("no finished preview to redrive: preview "
                                                  "the filter first"))
    return _task_page(state.tasks.redrive_matching(session.user, session.role.value, shown,
                                                   state.sources_of(shown.key)).task_id)


def recount(request: Request, state: ConsoleState, session: Session,
                  form: FormData) -> Response:
    """Start a new count scan of a stream (reads only)."""
    try:
        key = stream_key(state, _form(form))
    except UnknownStream as exc:
        return problem(request, session, exc)
    with state.conn.errors(key):
        letters = stream_length(state.conn.client, key)
    state.scans.start(key, letters)
    return RedirectResponse("/", status_code=303)


def logout(request: Request, state: ConsoleState, session: Session,
                 form: FormData) -> Response:
    state.signer.revoke(request.cookies.get(COOKIE))
    response = RedirectResponse("/login", status_code=303)
    response.delete_cookie(COOKIE, path="/")
    return response


ROUTES = {"/act": action(selected), "/delete": action(delete), "/preview": action(preview),
          "/redrive-matching": action(redrive_matching), "/recount": reading(recount),
          "/logout": reading(logout)}
