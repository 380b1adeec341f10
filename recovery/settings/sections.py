"""The smaller sections of a recovery run's settings: streams, dead letter, handler,
report, housekeeping, spark and plan (reprocess: ``recovery.settings.reprocess``)."""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from pydantic import Field, field_validator, model_validator

from recovery.redis_io.dlq_names import DeadLetterNames, template_problem
from recovery.settings.base import Section

HANDLER_PATH = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")
EXCEPTION_PATH = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*[.:][A-Za-z_]\w*$")


class StreamsSettings(Section):
    """Which streams and groups to recover."""

    keys: list[str] = Field(default_factory=list, description=(
        "explicit stream keys; with `match`, at least one of the two is set. Keys that are not "
        "streams are skipped and listed in the summary; dead-letter streams are never "
        "recovered from"))
    match: str | None = Field(None, description=(
        "a SCAN MATCH pattern of stream keys (e.g. `\"orders:*\"`), besides or instead of "
        "`keys`"))
    groups: list[str] = Field(default_factory=list, description=(
        "groups to recover; empty: every group of each stream"))
    scan_count: int = Field(1000, ge=1, le=100_000, description="SCAN COUNT for `match`")
    fail_when_empty: bool = Field(False, description=(
        "a run whose selection matches no stream with a selected group (summary `status` "
        "`empty`, metric `selected_units` 0) exits 1 instead of 0. Off by default: streams "
        "created on first use make an empty selection a normal state, and the "
        "`RedisStreamRecoveryNothingSelected` alert catches one that stays empty; turn it on "
        "where the streams always exist, so a typo (`order:*` for `orders:*`) fails the "
        "scheduler's task"))

    @model_validator(mode="after")
    def _something_selected(self) -> StreamsSettings:
        if not self.keys and not self.match:
            raise ValueError("select streams: set streams.keys and/or streams.match")
        return self


class DeadLetterSettings(Section):
    """Where dead letters go: ``<source><suffix>``, kept in the source's hash slot; or, with
    `stream`, a template of the name (``{stream}``, ``{group}``; ``{{`` / ``}}`` a literal
    brace) that may name one stream for many sources (docs/CONFIGURATION.md)."""

    suffix: str = Field(":dlq", min_length=1, pattern=r"^[^{}]+$", description=(
        "without `stream`, each source's dead-letter stream is `{<source>}<suffix>` (or "
        "`<a{tag}b><suffix>` for a key with a hash tag), in its source's hash slot: see "
        "[Dead-letter stream names](docs/CONFIGURATION.md#dead-letter-stream-names)"))
    stream: str | None = Field(None, min_length=1, description=(
        "a template of the dead-letter stream's name instead of the suffix rule, e.g. "
        "`\"CDL\"`, `\"dlq:{group}\"`, `\"{stream}:dlq\"`: see "
        "[Dead-letter stream names](docs/CONFIGURATION.md#dead-letter-stream-names)"))
    batch_size: int = Field(200, ge=1, le=5000, description=(
        "entries per atomic move (one script call)"))
    console_url: str | None = Field(None, description=(
        "the dead-letter console's base URL as browsers reach it (`redis-stream-recovery "
        "console`), e.g. `\"https://dlq.example.com\"`: the summaries' `console_links` then "
        "map each dead-letter stream a run wrote to (the dead-letter job: each it read) to "
        "`<console_url>/streams/<name>`, and the log names them; none: no links. See "
        "[the console](docs/OPERATIONS.md#dead-letter-console)"))

    @field_validator("console_url")
    @classmethod
    def _console_url_shape(cls, url: str | None) -> str | None:
        return console_base(url)

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


def console_base(url: str | None) -> str | None:
    """``dead_letter.console_url`` checked: an http(s) URL with a host and neither a login,
    a query nor a fragment; without its trailing ``/`` (None for none or empty)."""
    if not url or not url.strip():
        return None
    parts = urlsplit(url.strip())
    if parts.username or parts.password or parts.query or parts.fragment:
        raise ValueError("dead_letter.console_url holds a login, a query or a fragment: give "
                         "only the console's base address (logs and summaries print it)")
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("dead_letter.console_url is no http(s) URL with a host: give the "
                         "console's base address, like \"https://dlq.example.com\"")
    return url.strip().rstrip("/")


class HandlerSettings(Section):
    """The re-processing handler: ``package.module:function`` over batches of messages. No
    default: a real run in ``handler`` mode names one (``recovery.driver.handler_choice``).
    ``dead_letter_exceptions``: exception classes (``package.module.ClassName``) that mean
    ``Result.dead_letter`` for the message that raised them (``recovery.handlers``); imported
    on the driver before anything is claimed."""

    path: str | None = Field(None, description=(
        "`package.module:function`; required by a real run in `handler` mode (refused, exit 2, "
        "without it; a dry run, `requeue` and `reassign` need none). The example, "
        "`recovery.handlers:example_handler`, acks every message without a `poison` field: "
        "name it only to try the job"))
    batch_size: int = Field(100, ge=1, le=100_000, description="messages per handler call")
    max_failed_ratio: float | None = Field(None, ge=0, le=1, description=(
        "exit 1 when a larger share of handled messages failed; none: never"))
    timeout_s: float | None = Field(None, gt=0, le=86_400, description=(
        "a handler call slower than this (s) fails its batch (its entries stay pending, leased "
        "while the abandoned call runs, never dead-lettered in that run); must be below "
        "`claim.min_idle_ms` by more than 100 ms"))
    dead_letter_exceptions: list[str] = Field(default_factory=list, description=(
        "exception classes (`package.module.ClassName`, imported on the driver: one that does "
        "not import or is no exception class is refused, exit 2) that mean "
        "`Result.dead_letter` for the message that raised them, subclasses included; a batch "
        "that raised one is retried one by one to find it: "
        "[docs/OPERATIONS.md](docs/OPERATIONS.md#exceptions-that-dead-letter-a-message)"))

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


class ReportSettings(Section):
    """Where the per-entry Parquet report goes (a directory, local or any Hadoop path)."""

    path: str = Field("reports", min_length=1, description=(
        "Parquet report directory (local or any Hadoop file system, named with its scheme)"))
    pel_histograms: bool = Field(True, description=(
        "count each PEL's delivery counts and idle ages for the health histograms (reads "
        "each group's whole PEL once)"))
    progress_interval_s: float = Field(10.0, ge=0, description=(
        "seconds between the driver's progress lines (totals, and the streams that changed), "
        "read from Redis while the stages run; 0: off"))
    log_units_max: int = Field(100, ge=0, description=(
        "units listed at most in the log's group health table (those with the most pending "
        "entries) and summary table (the most failed, then the most entries); one line counts "
        "the others, which are in the health files and the JSON summary; 0: all"))


class HousekeepingSettings(Section):
    """Optional clean-up of the groups (off by default)."""

    remove_idle_consumers_ms: int | None = Field(None, ge=1, description=(
        "remove consumers idle this long (ms) that own no pending entries; none: off"))


class SparkSettings(Section):
    """How the work is spread."""

    partitions: int = Field(2, ge=1, le=10_000, description=(
        "parallel claim loops; few, fat partitions are best"))
    split_min_pending: int = Field(5000, ge=0, description=(  # recovery.driver.split
        "a stream and group with at least this many pending entries, and more than its share "
        "of the run (all pending entries over `spark.partitions`), is claimed and handed over "
        "by several tasks at once (README, \"One busy stream, many tasks\"); 0: each stream "
        "and group in one task"))


class PlanSettings(Section):
    """Applying a dry run's plan (``--plan``): how old a plan may be (s, from when the dry
    run started)."""

    max_age_s: int = Field(3600, ge=1, description=(
        "`--plan` refuses a dry run's plan older than this (s, from the dry run's start)"))
