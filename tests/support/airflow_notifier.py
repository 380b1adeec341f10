"""A notifier for the Airflow tests (imported inside the Airflow venv, never by the project's):
each call appends one JSON line to a file, so a test sees that a hook fired and for what."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from airflow.sdk import BaseNotifier


class FileNotifier(BaseNotifier):
    """Appends ``{"dag_id", "task_id", "run_id"}`` (what the context names) to `path`."""

    def __init__(self, path: str, context: Any = None) -> None:
        super().__init__(context)
        self.path = path

    def notify(self, context: Any) -> None:
        ti, dag_run = context.get("ti"), context.get("dag_run")
        record = {"dag_id": getattr(ti, "dag_id", None) or getattr(dag_run, "dag_id", None),
                  "task_id": getattr(ti, "task_id", None),
                  "run_id": getattr(ti, "run_id", None) or getattr(dag_run, "run_id", None),
                  "context_keys": sorted(context)}
        with Path(self.path).open("a") as out:
            out.write(json.dumps(record) + "\n")

    async def async_notify(self, context: Any) -> None:
        self.notify(context)
