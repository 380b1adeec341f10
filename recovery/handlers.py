"""The re-processing handler contract, its loader, and the example handlers.

A handler is a plain callable named in the config as ``package.module:function``::

    def handle(messages: list[Message]) -> Sequence[Result | bool]

It runs on executors over batches of messages and returns one result per message, in order.
``True`` / ``Result.success()`` acks the message; ``False`` / ``Result.failure(msg)`` leaves it
pending (the next run claims it again until it crosses ``max_deliveries``). A handler that
raises fails its whole batch with the exception as the error; a reply of the wrong length or
type fails the batch as "garbage". An exception of a class ``handler.dead_letter_exceptions``
names means ``Result.dead_letter`` for the message that raised it: raised for a batch of one,
that message is dead-lettered; raised for a larger batch (which message raised is unknown),
:class:`BatchRejected` tells the caller to call the handler again message by message.
With ``handler.timeout_s``, a call that has not returned in time fails its batch as "timed
out" (the messages stay pending). Handlers must be idempotent:
delivery is at-least-once.
"""

from __future__ import annotations

import importlib
import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from recovery.errors import HandlerError

log = logging.getLogger(__name__)
MAX_ERROR_CHARS = 1000


@dataclass(frozen=True, init=False)
class Message:
    """One pending entry handed to a handler. Field names and values are raw bytes."""

    stream: str
    group: str
    id: str
    fields: list[tuple[bytes, bytes]]
    delivery_count: int

    def __init__(self, stream: str, group: str, id: str,
                 fields: list[tuple[bytes, bytes]], delivery_count: int) -> None:
        # One dict update instead of the five object.__setattr__ calls of a frozen
        # dataclass's own __init__ (a message is made per pending entry: docs/PERFORMANCE.md).
        self.__dict__.update(stream=stream, group=group, id=id, fields=fields,
                             delivery_count=delivery_count)

    def field(self, name: bytes) -> bytes | None:
        """The value of the first field called `name`, or None."""
        return next((v for k, v in self.fields if k == name), None)


@dataclass(frozen=True)
class Result:
    """What a handler says about one message: success (acked), failure (stays pending and is
    retried by the next run, dead-lettered at the delivery limit), or, with `final`, a failure
    no retry can mend (a payload that does not parse, a customer that no longer exists): it
    is dead-lettered in this run, ``x-death-reason`` ``handler-rejected``."""

    ok: bool
    error: str | None = None
    final: bool = False

    @classmethod
    def success(cls) -> Result:
        return cls(True)

    @classmethod
    def failure(cls, error: str) -> Result:
        return cls(False, error)

    @classmethod
    def dead_letter(cls, error: str) -> Result:
        """Never retry this message: dead-letter it now, with `error`."""
        return cls(False, error, final=True)


# How to get a handler's module to Spark's driver and executors (README, "Handlers and
# re-processing"), said wherever one does not import.
SHIP_HINT = ("a wheel pip-installed where Spark runs, or spark-submit --py-files with the .py "
             "module or a .zip of its package (redis-stream-recovery run ... -- --py-files "
             "handlers.zip); redis-stream-recovery ships a <module>.py of the working "
             "directory itself")
Handler = Callable[[list[Message]], Sequence["Result | bool"]]
_CACHE: dict[str, Handler] = {}


def load_handler(path: str) -> Handler:
    """Import ``package.module:function``. Raises HandlerError (exit 2) naming the fix."""
    if path in _CACHE:
        return _CACHE[path]
    module_name, _, attr = path.partition(":")
    handler = _attribute("handler.path", path, module_name, attr)
    if not callable(handler):
        raise HandlerError(
            f"handler.path {path!r}: {attr!r} is not a callable in {module_name!r}; "
            "name a function as package.module:function"
        )
    _CACHE[path] = handler
    return handler


Rejects = tuple[type[Exception], ...]
_EXCEPTIONS: dict[str, type[Exception]] = {}


def load_exceptions(paths: Sequence[str]) -> Rejects:
    """Import each ``package.module.ClassName`` (or ``package.module:ClassName``) of
    ``handler.dead_letter_exceptions``. Raises HandlerError (exit 2) naming the path and the fix
    when one does not import or is not an exception class."""
    return tuple(_exception_class(path) for path in paths)


def _exception_class(path: str) -> type[Exception]:
    if path in _EXCEPTIONS:
        return _EXCEPTIONS[path]
    module_name, _, attr = path.rpartition(":") if ":" in path else path.rpartition(".")
    found = _attribute("handler.dead_letter_exceptions", path, module_name, attr)
    if not (isinstance(found, type) and issubclass(found, Exception)):
        raise HandlerError(
            f"handler.dead_letter_exceptions {path!r}: {attr!r} in {module_name!r} is not an "
            "exception class; name a subclass of Exception as package.module.ClassName")
    _EXCEPTIONS[path] = found
    return found



def _attribute(key: str, path: str, module_name: str, attr: str) -> object:
    """`attr` of module `module_name` (None where it has none), which setting `key` names
    as `path`. Raises HandlerError (exit 2) naming the fix when the module does not import:
    any import-time failure is the user's module's problem."""
    try:
        return getattr(importlib.import_module(module_name), attr, None)
    except Exception as exc:
        raise HandlerError(
            f"{key} {path!r}: module {module_name!r} does not import "
            f"({type(exc).__name__}: {exc}); install it on driver and executors or fix the path: "
            f"{SHIP_HINT}"
        ) from None

class HandlerTimedOut(Exception):
    """A handler call did not return within ``handler.timeout_s``; `call` is the thread
    still running it (``recovery.executor.handover.abandoned`` keeps its messages leased
    while it runs)."""

    def __init__(self, message: str, call: threading.Thread) -> None:
        super().__init__(message)
        self.call = call


class BatchRejected(Exception):
    """The handler raised one of ``handler.dead_letter_exceptions`` for a batch of several
    messages: the caller calls it again message by message (a batch of one each), so only the
    message that raises it is dead-lettered."""


def run_handler(handler: Handler, messages: list[Message], timeout_s: float | None = None,
                rejects: Rejects = ()) -> list[Result]:
    """Call `handler` on a batch and normalise its reply to one Result per message. An
    exception of a class in `rejects` is ``Result.dead_letter`` (its class and text as the
    error) for a batch of one message; any other fails the whole batch.

    Raises HandlerTimedOut when the call takes longer than `timeout_s` seconds, and
    BatchRejected when a batch of several raised one of `rejects`.
    """
    try:
        reply = _call(handler, messages, timeout_s)
    except HandlerTimedOut:
        raise
    except Exception as exc:
        error = _clip(f"{type(exc).__name__}: {exc}")
        if rejects and isinstance(exc, rejects):
            if len(messages) == 1:
                return [Result.dead_letter(error)]
            raise BatchRejected(error) from None
        return [Result.failure(error)] * len(messages)
    return normalise_reply(reply, len(messages))


def _call(handler: Handler, messages: list[Message], timeout_s: float | None) -> object:
    """`handler(messages)`, in a daemon thread when there is a timeout.

    Python cannot stop a thread: a call that times out is abandoned, not killed. If it
    returns later its reply is ignored; its messages stay pending and are delivered again
    (at-least-once), and the thread never keeps the worker process from exiting. The
    HandlerTimedOut raised carries the thread, so the caller can tell while it runs.
    """
    if timeout_s is None:
        return handler(messages)
    outcome: dict[str, object] = {}

    def call() -> None:
        try:
            outcome["reply"] = handler(messages)
        except Exception as exc:
            outcome["error"] = exc

    thread = threading.Thread(target=call, name="recovery-handler", daemon=True)
    thread.start()
    thread.join(timeout_s)
    if thread.is_alive():
        raise HandlerTimedOut(
            f"handler timed out after {timeout_s:g} s (handler.timeout_s) on a batch of "
            f"{len(messages)}; the call was abandoned", thread)
    if "error" in outcome:
        raise outcome["error"]  # type: ignore[misc]
    return outcome.get("reply")


def normalise_reply(reply: object, expected: int) -> list[Result]:
    """Results from a handler's reply; anything malformed fails the whole batch."""
    if isinstance(reply, (list, tuple)) and len(reply) == expected:
        results = [_as_result(r) for r in reply]
        if all(r is not None for r in results):
            return results  # type: ignore[return-value]
    shape = type(reply).__name__ + (f" of {len(reply)}" if hasattr(reply, "__len__") else "")
    error = f"handler returned garbage: expected a list of {expected} Result or bool, got {shape}"
    return [Result.failure(error)] * expected


SUCCESS = Result(True)
RETURNED_FALSE = Result(False, "handler returned False")


def _as_result(item: object) -> Result | None:
    if item is True:
        return SUCCESS
    if item is False:
        return RETURNED_FALSE
    if isinstance(item, Result):
        if item.error is None or len(item.error) <= MAX_ERROR_CHARS:
            return item  # frozen: safe to keep
        return Result(item.ok, _clip(item.error), item.final)
    return None


def _clip(text: str) -> str:
    return text if len(text) <= MAX_ERROR_CHARS else text[: MAX_ERROR_CHARS - 1] + "…"


def example_handler(messages: list[Message]) -> list[Result]:
    """The demo's handler: logs each message; one with a field ``poison`` fails."""
    results = []
    for m in messages:
        if m.field(b"poison") is not None:
            results.append(Result.failure(f"cannot parse {m.stream} {m.id}: poison payload"))
        else:
            log.info("reprocessed %s %s %s", m.stream, m.group, m.id)
            results.append(Result.success())
    return results


def noop(messages: list[Message]) -> list[bool]:
    """Succeeds on every message without looking at it (benchmarks)."""
    return [True] * len(messages)
