"""The console's audit log: every action (who, role, what, which stream, how many, when) as
one entry of a Redis stream the console owns (``DEFAULT_AUDIT_STREAM``, trimmed to about
``KEEP`` records), and the newest of them for the audit page."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

import redis

from recovery.redis_io.letters import append_audit, newest_entries

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
