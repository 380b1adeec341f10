"""Which job each command of ``redis-stream-recovery`` runs: the one place a command is
routed (:data:`ROUTES`). The job files are the package's own (``recovery/jobs/<module>.py``,
:data:`JOBS_DIR`), which spark-submit runs as they are; the checks before it and a run in
this process call the same job class (:meth:`Route.job`)."""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import recovery.jobs

if TYPE_CHECKING:
    from recovery.jobs.job_command import JobCommand

JOBS_DIR = Path(recovery.jobs.__file__).resolve().parent  # the job files spark-submit runs


@dataclass(frozen=True)
class Route:
    """A command's job: the module of its file and class in ``recovery.jobs``, the
    arguments the command adds before the user's job options, and whether the job runs
    Spark (a run in this process starts a local session for it)."""

    module: str
    job_class: str
    added: tuple[str, ...] = ()
    runs_spark: bool = True

    @property
    def file(self) -> Path:
        """The job file spark-submit runs."""
        return JOBS_DIR / f"{self.module}.py"

    def job(self) -> type[JobCommand[Any]]:
        """The job's command class, imported now (pyspark and pydantic with it)."""
        job: type[JobCommand[Any]] = getattr(
            importlib.import_module(f"recovery.jobs.{self.module}"), self.job_class)
        return job


ROUTES: dict[str, Route] = {
    "run": Route("recover", "RecoverJob"),
    "dry-run": Route("recover", "RecoverJob", ("--dry-run",)),
    "apply": Route("recover", "RecoverJob", ("--plan",)),  # followed by the PLAN argument
    "redrive": Route("redrive", "RedriveJob", runs_spark=False),
    "dead-letters": Route("dead_letters", "DeadLettersJob"),
}
