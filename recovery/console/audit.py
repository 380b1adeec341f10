"""The console's audit log: every action (who, role, what, which stream, how many, when) as
one entry of a Redis stream the console owns (``DEFAULT_AUDIT_STREAM``, trimmed to about
``KEEP`` records), and the newest of them for the audit page."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

import redis

from recovery.errors import ConfigError
from recovery.redis_io.letters import append_audit, key_shape, newest_entries

DEFAULT_AUDIT_STREAM = "recovery:console:audit"
KEEP = 100_000  # records kept (MAXLEN ~)
FIELDS = ("at", "who", "role", "action", "stream", "count", "detail")


@dataclass(frozen=True)
class AuditRecord:
    """One action: `at` ISO 8601 UTC, `count` letters it touched, `detail` a short line."""

    entry_id: str
    at: str
    who: str
    role: str
    action: str
    stream: str
    count: int
    detail: str


def check_audit_stream(client: redis.Redis, key: str, pairs: Sequence[tuple[str, str]]
                       ) -> None:
    """Refuse (ConfigError, exit 2) an audit stream the console does not own: appending to
    it would feed its consumers audit records, and ``MAXLEN ~`` would trim its entries."""
    problem = _not_ours(client, key, [k for pair in pairs for k in pair])
    if problem is not None:
        raise ConfigError(f"--audit-stream {key!r} {problem}: the console appends to it and "
                          "trims it; name a stream of its own (default "
                          f"{DEFAULT_AUDIT_STREAM})")


def _not_ours(client: redis.Redis, key: str, selected: Sequence[str]) -> str | None:
    """Why `key` is not an audit stream (None: it is one, or it does not exist): a selected
    source or dead-letter stream, a key of another type, a stream with consumer groups, or
    one whose oldest or newest entry has a field no audit record has."""
    if key in selected:
        return "is a selected stream or dead-letter stream"
    shape = key_shape(client, key)
    if shape.kind in ("none", "stream") and not shape.groups and all(
            {f.decode("utf-8", "replace") for f in names} <= set(FIELDS)
            for names in shape.edge_fields):
        return None
    if shape.kind != "stream":
        return f"is a {shape.kind}, not a stream"
    if shape.groups:
        return f"is a stream with {shape.groups} consumer group(s)"
    return "holds entries that are not audit records"


def record(client: redis.Redis, key: str, who: str, role: str, action: str, stream: str,
           count: int, detail: str = "") -> str:
    """Append one action to the audit stream `key`. Returns its entry ID."""
    at = datetime.now(tz=UTC).isoformat(timespec="milliseconds")
    values = (at, who, role, action, stream, str(count), detail[:1000])
    return append_audit(client, key, dict(zip(FIELDS, values, strict=True)), KEEP)


def newest(client: redis.Redis, key: str, count: int = 200) -> list[AuditRecord]:
    """The newest `count` records, newest first; fields missing or not UTF-8 shown as such."""
    found = []
    for entry_id, flat in newest_entries(client, key, count):
        got = {flat[i].decode("utf-8", "replace"): flat[i + 1].decode("utf-8", "replace")
               for i in range(0, len(flat) - 1, 2)}
        count_text = got.get("count", "")
        found.append(AuditRecord(entry_id, got.get("at", ""), got.get("who", ""),
                                 got.get("role", ""), got.get("action", ""),
                                 got.get("stream", ""),
                                 int(count_text) if count_text.isdigit() else 0,
                                 got.get("detail", "")))
    return found
