"""The smaller sections of a recovery run's settings: streams, dead letter, handler,
reprocess, report, housekeeping, spark and plan."""

from __future__ import annotations

import re

from pydantic import Field, field_validator, model_validator

from recovery.redis_io.dlq_names import DeadLetterNames, template_problem
from recovery.schemas import Mode
from recovery.settings.base import Section

HANDLER_PATH = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")
EXCEPTION_PATH = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*[.:][A-Za-z_]\w*$")


class StreamsSettings(Section):
    """Which streams and groups to recover."""

    keys: list[str] = Field(default_factory=list)
    match: str | None = None
    groups: list[str] = Field(default_factory=list)
    scan_count: int = Field(1000, ge=1, le=100_000)
    fail_when_empty: bool = Field(False, description=(
        "A run whose selection matches no stream with a selected group (status `empty`) "
        "exits 1 instead of 0. Off by default: an empty selection can be a normal state "
        "(streams created on first use), and `selected_units` 0 with its alert says it."))

    @model_validator(mode="after")
    def _something_selected(self) -> StreamsSettings:
        if not self.keys and not self.match:
            raise ValueError("select streams: set streams.keys and/or streams.match")
        return self


class DeadLetterSettings(Section):
    """Where dead letters go: ``<source><suffix>``, kept in the source's hash slot; or, with
    `stream`, a template of the name (``{stream}``, ``{group}``; ``{{`` / ``}}`` a literal
    brace) that may name one stream for many sources (docs/CONFIGURATION.md)."""

    suffix: str = Field(":dlq", min_length=1, pattern=r"^[^{}]+$")
    stream: str | None = Field(None, min_length=1)
    batch_size: int = Field(200, ge=1, le=5000)

    @field_validator("stream")
    @classmethod
    def _template_shape(cls, template: str | None) -> str | None:
        problem = None if template is None else template_problem(template)
        if problem is not None:
            raise ValueError(f"{template!r} is no dead-letter stream name: {problem}")
        return template

    @property
    def names(self) -> DeadLetterNames:
        """The naming rule these settings set (``recovery.redis_io.dlq_names``)."""
        return DeadLetterNames(self.suffix, self.stream)


class HandlerSettings(Section):
    """The re-processing handler: ``package.module:function`` over batches of messages. No
    default: a real run in ``handler`` mode names one (``recovery.driver.handler_choice``).
    ``dead_letter_exceptions``: exception classes (``package.module.ClassName``) that mean
    ``Result.dead_letter`` for the message that raised them (``recovery.handlers``); imported
    on the driver before anything is claimed."""

    path: str | None = None
    batch_size: int = Field(100, ge=1, le=100_000)
    max_failed_ratio: float | None = Field(None, ge=0, le=1)
    timeout_s: float | None = Field(None, gt=0, le=86_400)
    dead_letter_exceptions: list[str] = Field(default_factory=list)

    @field_validator("dead_letter_exceptions")
    @classmethod
    def _exception_shape(cls, paths: list[str]) -> list[str]:
        for path in paths:
            if not EXCEPTION_PATH.match(path):
                raise ValueError(
                    f"{path!r} is not an exception class path: write it as "
                    "package.module.ClassName, e.g. json.JSONDecodeError")
        return paths

    @field_validator("path")
    @classmethod
    def _path_shape(cls, path: str | None) -> str | None:
        if path is not None and not HANDLER_PATH.match(path):
            raise ValueError(
                f"{path!r} is not a handler path: write it as package.module:function, "
                "e.g. recovery.handlers:example_handler"
            )
        return path


MODE_NAMES = tuple(mode.value for mode in Mode)
REQUEUE_TEMPLATE = re.compile(r"^\{stream\}[^{}]*(\{group\}[^{}]*)?$")


class ReprocessSettings(Section):
    """How entries that are not dead-lettered are re-processed (README, "Re-processing"):
    ``handler`` calls the handler; ``requeue`` appends each entry again, as a new message
    with its deliveries so far, to its stream (or to ``requeue_stream``, a per-group retry
    stream: ``{stream}`` then a suffix, which may hold ``{group}``) and acks the original;
    ``reassign`` hands it to a live consumer of its group (XCLAIM), spread evenly.
    ``delete_acked``: ack with XACKDEL ... ACKED after a hand-over, a dead-letter move and a
    requeue, which also deletes the entry from its stream once no other consumer group still
    references it (Redis 8.2+; refused at start on a server without XACKDEL)."""

    mode: str = Mode.HANDLER.value  # a schemas.Mode value: the modes registered
    requeue_stream: str | None = None
    live_within_ms: int = Field(60_000, gt=0)  # reassign: "live" = seen within this (ms)
    delete_acked: bool = False  # XACKDEL ... ACKED instead of XACK (Redis 8.2+)

    @field_validator("mode", mode="before")
    @classmethod
    def _registered_mode(cls, mode: object) -> object:
        if mode not in MODE_NAMES:
            named = [repr(name) for name in MODE_NAMES]
            raise ValueError(f"Input should be {', '.join(named[:-1])} or {named[-1]}")
        return mode

    @field_validator("requeue_stream")
    @classmethod
    def _template_shape(cls, template: str | None) -> str | None:
        if template is not None and not REQUEUE_TEMPLATE.match(template):
            raise ValueError(
                f"{template!r} is not a retry stream name: start it with {{stream}} and add a "
                "suffix that may hold {group}, e.g. {stream}:retry:{group}")
        return template


class ReportSettings(Section):
    """Where the per-entry Parquet report goes (a directory, local or any Hadoop path)."""

    path: str = Field("reports", min_length=1)
    pel_histograms: bool = True  # read each group's whole PEL once for the health histograms
    # Seconds between the driver's progress lines (totals, and the streams that changed),
    # read from Redis while the stages run (recovery/driver/progress/reporter.py); 0 = off.
    progress_interval_s: float = Field(10.0, ge=0)
    # Units listed at most in the log's group health and summary tables (the others are
    # counted; every unit is in the health files and the JSON summary); 0 = all.
    log_units_max: int = Field(100, ge=0)


class HousekeepingSettings(Section):
    """Optional clean-up of the groups (off by default)."""

    remove_idle_consumers_ms: int | None = Field(None, ge=1)


class SparkSettings(Section):
    """How the work is spread."""

    partitions: int = Field(2, ge=1, le=10_000)
    # A stream and group with at least this many pending entries, and more than its share of
    # the run (all pending entries over `partitions`), is claimed and handed over by several
    # tasks at once (recovery.driver.split); 0 keeps each stream and group in one task.
    split_min_pending: int = Field(5000, ge=0)


class PlanSettings(Section):
    """Applying a dry run's plan (``--plan``): how old a plan may be (s, from when the dry
    run started)."""

    max_age_s: int = Field(3600, ge=1)
