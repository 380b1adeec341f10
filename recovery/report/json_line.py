"""The one-line JSON form of a run's or a redrive's summary: stdout's last line, which
schedulers read (Airflow XCom). Imports nothing heavy (a redrive uses it without Spark's
report code)."""

from __future__ import annotations

import json
from dataclasses import asdict, fields, is_dataclass
from typing import Any

from recovery.rows import Row


class JsonLine:
    """For dataclass summaries: ``json_line()``, every field as compact JSON, keys sorted
    (but a field with ``metadata={"json": False}``)."""

    def json_line(self) -> str:
        """The last line of stdout, for schedulers (Airflow XCom). The fields go to JSON as
        they are (``dataclasses.asdict`` would first copy every nested row: seconds at
        100,000 streams); a dataclass inside one becomes its dict."""
        summary: Any = self  # a dataclass instance (each user of this mixin is one)
        top = {f.name: getattr(summary, f.name) for f in fields(summary)
               if f.metadata.get("json", True)}
        return json.dumps(top, sort_keys=True, separators=(",", ":"), default=_nested)


def _nested(value: object) -> object:
    """What json.dumps cannot encode itself: a typed row (``recovery.rows``) as the mapping
    it is written as, another dataclass instance as its dict."""
    if isinstance(value, Row):
        return value.as_dict()
    if is_dataclass(value) and not isinstance(value, type):
        return asdict(value)
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")
