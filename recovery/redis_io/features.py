"""What the server offers, asked of the server once per run: ``ServerFeatures``.

Never decided by ``redis_version`` alone: Valkey 8.x and 9.x report ``redis_version:7.2.4``
whatever they have. The probe reads, in one pipeline:

- ``INFO server``: ``redis_version``, ``server_name`` / ``valkey_version`` (Valkey only);
- ``COMMAND INFO xautoclaim xackdel xnack``: one element per name, nil for a command the
  server does not know;
- ``COMMAND DOCS xautoclaim xinfo|consumers xreadgroup xadd``: each command's ``history``
  (the versions of the reply changes: XAUTOCLAIM's deleted IDs 7.0.0, XINFO CONSUMERS'
  ``inactive`` 7.2.0) and ``arguments`` (XREADGROUP's ``claim``, XADD's ``idmp``). Redis 6.2
  has no COMMAND DOCS (an ``ERR``): none of the 7.0+ changes.

A user whose ACL rules refuse COMMAND (docs/ACL.md line 7), and a server or proxy that does not
know it (``rename-command COMMAND ""``, a proxy's ``unknown command``), give ``asked=False``:
the reply changes then follow ``redis_version`` (the only thing left to read), and no
optional command counts as present. The object is a frozen dataclass of plain values: it
pickles, and travels to the executors inside ``JobParams``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields, replace
from typing import Any

import redis
from redis.cluster import RedisCluster
from redis.exceptions import ResponseError

from recovery.redis_io.acl_errors import denied_command
from recovery.redis_io.error_codes import error_code, server_text

COMMANDS = ("xautoclaim", "xackdel", "xnack")  # COMMAND INFO: present or not
DOCUMENTED = ("xautoclaim", "xinfo|consumers", "xreadgroup", "xadd")  # COMMAND DOCS
DELETED_IDS_SINCE = "7.0.0"  # XAUTOCLAIM's third reply element (COMMAND DOCS history)
INACTIVE_SINCE = "7.2.0"  # XINFO CONSUMERS' inactive field (COMMAND DOCS history)


@dataclass(frozen=True)
class ServerFeatures:
    """What one server offers. `server`: ``redis`` or ``valkey``; `version`: its own version
    (``valkey_version`` for Valkey); `redis_version`: INFO's ``redis_version`` as numbers
    (7.2.4 on every Valkey); `asked`: whether COMMAND INFO and DOCS answered (False: refused
    by the user's ACL rules). The rest: whether the server has it."""

    server: str
    version: str
    redis_version: tuple[int, int, int]
    asked: bool
    # COMMAND DOCS answers: Redis 7.0+ and Valkey (the release that also named subcommands in
    # ACL LOG and kept an error's code when a script's redis.call raises it)
    command_docs: bool
    xautoclaim: bool  # XAUTOCLAIM (Redis 6.2+, Valkey)
    claim_reports_deleted: bool  # XAUTOCLAIM's third element, deleted IDs (7.0+, Valkey)
    consumer_inactive: bool  # XINFO CONSUMERS ``inactive`` (7.2+, Valkey)
    xackdel: bool  # XACKDEL with KEEPREF / DELREF / ACKED (Redis 8.2+)
    xreadgroup_claim: bool  # XREADGROUP ... CLAIM min-idle (Redis 8.4+)
    xadd_idmp: bool  # XADD ... IDMP / IDMPAUTO (Redis 8.6+)
    xnack: bool  # XNACK (Redis 8.8+)

    @property
    def name(self) -> str:
        """``Redis 8.6.3``, ``Valkey 9.1.0``: for messages."""
        return f"{self.server.capitalize()} {self.version}"


def probe_features(client: redis.Redis) -> ServerFeatures:
    """Ask the server behind `client` what it offers: INFO server, COMMAND INFO and COMMAND
    DOCS (module docstring): three small replies. On a Redis Cluster every primary is asked
    (one of an older version in a rolling upgrade has not what the others have; redis-py
    cannot route these commands by key), and only what all of them offer counts."""
    if isinstance(client, RedisCluster):
        return _common([_probe_node(client.get_redis_connection(node))
                        for node in client.get_primaries()])
    return _probe_node(client)


def _common(found: list[ServerFeatures]) -> ServerFeatures:
    """What every server of `found` offers, named (server, version) after the one that
    offers least, for messages."""
    common = {f.name: all(getattr(one, f.name) for one in found)
              for f in fields(ServerFeatures) if f.type in (bool, "bool")}
    named = min(found, key=lambda one: sum(getattr(one, name) for name in common))
    return replace(named, **common)  # type: ignore[arg-type]


def _probe_node(client: redis.Redis) -> ServerFeatures:
    """`probe_features` of one server."""
    info = _text_dict(client.execute_command("INFO", "server"))
    try:
        known = client.execute_command("COMMAND INFO", *COMMANDS)
    except ResponseError as exc:
        if not _is_refusal(exc):
            raise
        return _from_version(info)
    try:
        docs: dict[str, dict[str, Any]] | None = _docs(
            client.execute_command("COMMAND DOCS", *DOCUMENTED))
    except ResponseError as exc:
        if _is_refusal(exc):
            return _from_version(info)
        docs = None  # Redis 6.2: no COMMAND DOCS at all
    has_docs, docs = docs is not None, docs or {}
    present = {name for name, row in zip(COMMANDS, known, strict=True) if row}
    return ServerFeatures(
        server=_server(info), version=_own_version(info),
        redis_version=_version_tuple(info.get("redis_version", "0.0.0")), asked=True,
        command_docs=has_docs, xautoclaim="xautoclaim" in present,
        claim_reports_deleted=DELETED_IDS_SINCE in _history(docs, "xautoclaim"),
        consumer_inactive=INACTIVE_SINCE in _history(docs, "xinfo|consumers"),
        xackdel="xackdel" in present,
        xreadgroup_claim="claim" in _argument_words(docs, "xreadgroup"),
        xadd_idmp="idmp" in _argument_words(docs, "xadd"),
        xnack="xnack" in present)


def _is_refusal(exc: ResponseError) -> bool:
    """Whether `exc` refuses COMMAND itself: an ACL refusal (redis-py raises
    NoPermissionError, a ResponseError), or ``ERR unknown command 'command'`` (renamed or
    disabled in the server's configuration, or a proxy that does not pass it on)."""
    text = str(exc).lower()
    return error_code(exc) == "NOPERM" or "no permissions" in text \
        or any(f"unknown command {q}command{q}" in text for q in "'`")  # 7.0+, 6.2


def _from_version(info: Mapping[str, str]) -> ServerFeatures:
    """Where COMMAND is refused: the reply changes by ``redis_version``, no optional command."""
    version = _version_tuple(info.get("redis_version", "0.0.0"))
    return ServerFeatures(
        server=_server(info), version=_own_version(info), redis_version=version,
        asked=False, command_docs=version >= (7, 0, 0), xautoclaim=version >= (6, 2, 0),
        claim_reports_deleted=version >= (7, 0, 0),
        consumer_inactive=version >= (7, 2, 0), xackdel=False, xreadgroup_claim=False,
        xadd_idmp=False, xnack=False)


def _server(info: Mapping[str, str]) -> str:
    return "valkey" if info.get("server_name") == "valkey" or "valkey_version" in info \
        else "redis"


def _own_version(info: Mapping[str, str]) -> str:
    return info.get("valkey_version") or info.get("redis_version", "0.0.0")


def _version_tuple(text: str) -> tuple[int, int, int]:
    """``"7.0.15"`` -> (7, 0, 15); missing or odd parts count 0."""
    parts = [int(p) if p.isdigit() else 0 for p in str(text).split(".")[:3]]
    return (*parts, 0, 0, 0)[:3]  # type: ignore[return-value]


def _text(value: object) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def _text_dict(reply: object) -> dict[str, str]:
    """INFO's reply (redis-py parses it into a dict, or the raw text) as str -> str."""
    if isinstance(reply, Mapping):
        return {_text(k): _text(v) for k, v in reply.items()}
    lines = _text(reply).splitlines()
    return dict(line.split(":", 1) for line in lines if ":" in line and not line.startswith("#"))


def _pairs(flat: object) -> dict[str, Any]:
    """A RESP2 map (``[k1, v1, k2, v2]``) or a RESP3 one (a dict) as a dict with str keys."""
    if isinstance(flat, Mapping):
        return {_text(k): v for k, v in flat.items()}
    items = list(flat) if isinstance(flat, Sequence) and not isinstance(flat, bytes) else []
    return {_text(k): v for k, v in zip(items[0::2], items[1::2], strict=False)}


def _docs(reply: object) -> dict[str, dict[str, Any]]:
    """COMMAND DOCS' reply: command name (lower case) -> its doc map."""
    return {name.lower(): _pairs(doc) for name, doc in _pairs(reply).items()}


def _history(docs: Mapping[str, Mapping[str, Any]], command: str) -> set[str]:
    """The versions a command's reply or arguments changed in (``history``: [version, what])."""
    return {_text(row[0]) for row in docs.get(command, {}).get("history") or () if row}


def _argument_words(docs: Mapping[str, Mapping[str, Any]], command: str) -> set[str]:
    """The names and tokens of a command's arguments (``CLAIM`` is the token of XREADGROUP's
    ``min-idle-time``), nested blocks included, lower case."""
    words: set[str] = set()
    todo = list(docs.get(command, {}).get("arguments") or ())
    while todo:
        argument = _pairs(todo.pop())
        words |= {_text(argument.get(k, "")).lower() for k in ("name", "token")}
        todo += list(argument.get("arguments") or ())
    return words


XACKDEL_PROBE_KEY = "recovery:xackdel-probe"  # never created: check_may_run_xackdel


def check_may_run_xackdel(client: redis.Redis) -> None:
    """Raise the server's NOPERM when the Redis user may not run XACKDEL (the documented ACL
    rules leave it out). Asked before anything is written: the dead-letter and requeue
    scripts call XACKDEL after their XADD, and a script is not rolled back, so a refusal
    there would leave letters and copies whose originals stay pending. The question is an
    XACKDEL of ID 0-1 on a key that does not exist (``XACKDEL_PROBE_KEY``; answers ``[-1]``,
    changes nothing); a refused key (ACL key patterns) means the command itself is allowed
    (Redis checks the command first). On a Redis Cluster every primary is asked."""
    nodes = [client.get_redis_connection(node) for node in client.get_primaries()] \
        if isinstance(client, RedisCluster) else [client]  # ACL rules are per node
    for node in nodes:  # a MOVED answer: the command passed the ACL check, made first
        try:
            node.execute_command("XACKDEL", XACKDEL_PROBE_KEY, "recovery", "ACKED", "IDS", 1,
                                 "0-1")
        except redis.exceptions.ResponseError as exc:
            if denied_command(server_text(exc)):
                raise
