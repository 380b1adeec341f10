"""The code of a server's error reply (``NOGROUP``, ``WRONGTYPE``, ``NOSCRIPT``, ...),
wherever it sits in the text: the one place the job classifies server errors.

A reply starts with its code (``NOGROUP No such key 's' or consumer group 'g'``), but the
code is not always the first word of what reaches the job:

- an error raised by ``redis.call`` inside a script: Redis 7.0+ and Valkey keep the code
  first and add where it happened (``NOGROUP No such key ... script: <sha>, on
  @user_script:25.``); Redis 6.2 wraps it in a generic error: ``ERR Error running script
  (call to f_<sha>): @user_script:25: NOGROUP No such key ...``;
- redis-py takes off the codes it maps to its own classes (``ERR``, ``NOSCRIPT``, ``NOPERM``,
  ``WRONGPASS``, ...) and keeps them as the exception's ``status_code``;
- redis-py's pipelines put ``Command # n (...) of pipeline caused error: `` before the text.

ACL refusals inside scripts carry no code at all: see ``acl_errors``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from redis.exceptions import NoPermissionError, ResponseError

GENERIC = "ERR"  # the code of an error that names none
PIPELINE_PREFIX = re.compile(r"^Command # \d+ \((.*?)\) of pipeline caused error: ", re.DOTALL)
# Redis 6.2's wrapper of an error raised in a script: "Error running script (call to
# f_<sha>): @user_script:<line>: " (the line may be "?"; an ACL refusal repeats the place as
# "@user_script: <line>: "). Group 1: the error as raised.
SCRIPT_WRAPPER = re.compile(
    r"^(?:ERR )?Error running script \(call to [^)]*\): (?:@?\w+: ?[\d?]+: )*(.*)$", re.DOTALL)
CODE = re.compile(r"^([A-Z][A-Z0-9_]+)(?:\s|$)")  # codes are upper case, e.g. "NOGROUP "

VANISHED = "vanished"  # reply element of a script call whose stream or group no longer exists
UNIT_GONE_CODES = ("NOGROUP", "WRONGTYPE")  # also raised inside scripts (any server version)
NOT_LETTERS = "NOTLETTERS"  # the move script's refusal of a dead-letter stream not the job's


@dataclass(frozen=True)
class TargetRefused:
    """Reply element of a move whose unit's dead-letter stream is not the job's to write
    (``NOTLETTERS <type> <why>`` from dead_letter.lua): nothing of that unit was written
    or acked. `kind`: the key's type; `why`: what the script found."""

    kind: str
    why: str


def target_refused(exc: Exception) -> TargetRefused | None:
    """The refusal `exc` carries (a NOTLETTERS error reply), else None."""
    if not isinstance(exc, ResponseError) or error_code(exc) != NOT_LETTERS:
        return None
    kind, _, why = server_text(exc).removeprefix(NOT_LETTERS).strip().partition(" ")
    return TargetRefused(kind, why)


def server_text(error: object) -> str:
    """The server's error text of `error` (an exception or a text), without redis-py's
    pipeline prefix; "" when it has none. Never raises."""
    try:
        text = error if isinstance(error, (str, bytes)) else str(error) if error is not None \
            else ""
        if isinstance(text, bytes):
            text = text.decode("utf-8", "replace")
        return PIPELINE_PREFIX.sub("", text).strip()
    except Exception:  # an exception whose str() fails: no text
        return ""


def error_code(error: object) -> str:
    """The code of a server error (an exception or its text): the code of the error a script
    raised inside Redis 6.2's wrapper, else the one redis-py took off (``status_code``),
    else the text's first word when it is a code; ``ERR`` when there is none. Never raises."""
    text = server_text(error)
    wrapped = SCRIPT_WRAPPER.match(text)
    if wrapped:
        return _leading_code(wrapped.group(1).strip()) or GENERIC
    taken_off = getattr(error, "status_code", None)
    if isinstance(taken_off, str) and CODE.match(taken_off):
        return taken_off
    return _leading_code(text) or GENERIC


def _leading_code(text: str) -> str | None:
    found = CODE.match(text)
    return found.group(1) if found else None


def permission_refusal(reply: object) -> str | None:
    """The first line of `reply` when it is the server's refusal of a key or command for
    this user (NOPERM, however redis-py classed it), else None."""
    if isinstance(reply, NoPermissionError) or (
            isinstance(reply, ResponseError) and error_code(reply) == "NOPERM"):
        return str(reply).splitlines()[0]
    return None


def first_refusal(replies: Iterable[object]) -> str | None:
    """The first of `replies` (as ``streams.each`` gives them) that is a permission refusal
    (``permission_refusal``); None when none is. Another error is raised."""
    for reply in replies:
        refusal = permission_refusal(reply)
        if refusal is not None:
            return refusal
        if isinstance(reply, Exception):
            raise reply
    return None


def unit_vanished(exc: Exception) -> bool:
    """True for NOGROUP / WRONGTYPE: the stream or its group is gone (or was replaced), as a
    command's reply or raised inside one of the job's scripts (any server version)."""
    return isinstance(exc, ResponseError) and error_code(exc) in UNIT_GONE_CODES
