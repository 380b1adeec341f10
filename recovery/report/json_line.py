"""The one-line JSON form of a run's or a redrive's summary: stdout's last line, which
schedulers read (Airflow XCom). Imports nothing heavy (a redrive uses it without Spark's
report code)."""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Any


class JsonLine:
    """For dataclass summaries: ``json_line()``, every field as compact JSON, keys sorted."""

    def json_line(self) -> str:
        """The last line of stdout, for schedulers (Airflow XCom)."""
        fields: Any = self  # a dataclass instance (each user of this mixin is one)
        return json.dumps(asdict(fields), sort_keys=True, separators=(",", ":"))
