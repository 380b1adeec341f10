"""Which handler a run uses: the one ``handler.path`` names, never one by default.

A default handler would decide the fate of every stuck entry for a config that forgot to
name one (the example handler acks every message without a ``poison`` field), so, as in
Celery, Sidekiq and BullMQ, the processor is required where it is used: a real run in
``reprocess.mode = handler``. A dry run calls no handler (it reads, plans and reports), so it
needs none and only warns; ``requeue`` and ``reassign`` hand entries back to Redis.
"""

from __future__ import annotations

import logging

from recovery.errors import ConfigError
from recovery.executor.handover.modes import mode_of
from recovery.handlers import load_exceptions, load_handler
from recovery.settings.model import Settings

log = logging.getLogger(__name__)
NO_HANDLER = (
    "handler.path is not set: reprocess.mode = handler hands every stuck entry to a handler, "
    "and there is no default; name yours as package.module:function (the example, "
    "recovery.handlers:example_handler, acks every message without a poison field), or set "
    "reprocess.mode = requeue or reassign (fix it in the --config file, "
    "RECOVERY_HANDLER__PATH or --set)"
)


def check_handler(settings: Settings, dry_run: bool = False) -> None:
    """Import the handler ``handler.path`` names, if any, and the exception classes of
    ``handler.dead_letter_exceptions`` (HandlerError, exit 2, when one does not import or is
    not an exception class). Raises ConfigError (exit 2) for a real run in handler mode that
    names no handler; a dry run in that mode logs a WARNING instead."""
    load_exceptions(settings.handler.dead_letter_exceptions)
    path = settings.handler.path
    if path is not None:
        load_handler(path)
    elif mode_of(settings.reprocess.mode).calls_handler:
        if not dry_run:
            raise ConfigError(NO_HANDLER)
        log.warning("handler.path is not set: this dry run calls no handler, but a real run "
                    "in handler mode needs handler.path (package.module:function)")
