"""The commands a Markdown document shows, read from the document itself, and each turned
into the environment and argv that run it.

A command is code (an inline span, whitespace folded, or a line of an indented or fenced code
block, ``\\`` continuations joined) whose program is ``spark-submit`` or
``redis-stream-recovery`` (a path ending so too, optionally after ``NAME=value``
assignments), followed by at least one argument: a bare program name is a mention, not a
command. A synopsis with alternatives (``redis-stream-recovery run | dry-run | apply PLAN
[options]``) is one command per alternative, each with the common tail."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

PROGRAM = r"(?:\S*/)?(?:spark-submit|redis-stream-recovery)"
COMMAND = re.compile(rf"^(?:[A-Z_]+=\S+ )*{PROGRAM} \S")
FENCE = re.compile(r"^```.*?^```[ \t]*$", re.DOTALL | re.MULTILINE)
SPAN = re.compile(r"`([^`]+)`")
SYNOPSIS = re.compile(rf"^(?P<head>(?:[A-Z_]+=\S+ )*{PROGRAM}) (?P<alts>[^\[]+?)(?P<tail> \[.*)?$")
ASSIGNMENT = re.compile(r"^([A-Z_]+)=(.*)$")
OPTIONAL = re.compile(r"(\[[^\]]*\])")


def _folded(text: str) -> str:
    return " ".join(text.replace("\\\n", " ").split())


def code_texts(markdown: str) -> list[str]:
    """The document's code: the lines of its code blocks, then its inline spans."""
    blocks = [line for fence in FENCE.findall(markdown) for line in fence.splitlines()[1:-1]]
    prose = FENCE.sub("", markdown)
    indented = re.findall(r"^ {4}(.*(?:\\\n {4}.*)*)$", prose, re.MULTILINE)
    return [_folded(text) for text in [*blocks, *indented, *SPAN.findall(prose)]]


def expand(command: str) -> list[str]:
    """A synopsis's alternatives as commands (`command` itself when it has none)."""
    found = SYNOPSIS.match(command)
    if " | " not in command or found is None:
        return [command]
    tail = found["tail"] or ""
    return [f"{found['head']} {alt.strip()}{tail}" for alt in found["alts"].split(" | ")]


def commands(markdown: str) -> list[str]:
    """Every command `markdown` shows, synopses expanded, each once, in document order."""
    found = [cmd for text in code_texts(markdown) if COMMAND.match(text) for cmd in expand(text)]
    return list(dict.fromkeys(found))


@dataclass(frozen=True)
class Invocation:
    """How to run a command: the variables it assigns, and its argv."""

    env: dict[str, str]
    argv: list[str]


def invocation(command: str, fills: dict[str, list[str]]) -> Invocation:
    """`command` as written, its placeholders filled: an optional part (``[...]``) whose text
    is a key of `fills` becomes that list; any other optional part is kept, and must be
    options (``[--set claim.min_idle_ms=600000]``); an upper-case word (``PLAN``) becomes
    its list in `fills`. A placeholder left unfilled is an error (running it would test
    nothing)."""
    words: list[str] = []
    for piece in OPTIONAL.split(command):
        if OPTIONAL.fullmatch(piece) and piece[1:-1] in fills:
            words += fills[piece[1:-1]]
        elif OPTIONAL.fullmatch(piece) and not piece.startswith("[-"):
            raise ValueError(f"{command!r}: fill the placeholder {piece}")
        else:
            words += _filled(shlex.split(piece.strip("[]")), fills, command)
    env: dict[str, str] = {}
    while words and (assigned := ASSIGNMENT.match(words[0])):
        env[assigned[1]] = assigned[2]
        words.pop(0)
    return Invocation(env, words)


def _filled(words: list[str], fills: dict[str, list[str]], command: str) -> list[str]:
    """`words` with each upper-case placeholder (``PLAN``, ``FILE``) replaced."""
    out: list[str] = []
    for word in words:
        if word.isupper() and not ASSIGNMENT.match(word):
            if word not in fills:
                raise ValueError(f"{command!r}: fill the placeholder {word}")
            out += fills[word]
        else:
            out.append(word)
    return out
