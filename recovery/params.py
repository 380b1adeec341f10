"""What travels from the driver to the executors: small frozen dataclasses, no settings object.

Built on the driver from the validated settings (``recovery.settings.model.executor_params``). This
module imports nothing heavy: Spark's Python workers import it at their first task, so they
need not load pydantic (a test holds it).
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from datetime import UTC, datetime
from fnmatch import fnmatchcase
from typing import Any


@dataclass(frozen=True)
class RedisParams:
    """Connection parameters shipped to executors; ``repr`` never shows the password."""

    url: str
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    connect_timeout_s: float = 5.0
    socket_timeout_s: float = 30.0
    tls_ca_file: str | None = None
    tls_cert_file: str | None = None
    tls_key_file: str | None = None
    tls_check_hostname: bool = True
    cluster: bool | str = "auto"  # True, False or "auto"
    # a request or reply may take socket_timeout_s plus 1 s per this many bytes
    # (recovery.redis_io.deadline)
    min_transfer_bytes_per_s: float = 65536.0


@dataclass(frozen=True)
class OrderParams:
    """Per-key ordered recovery (``order.*`` settings; ``recovery.executor.ordered``).

    `key_field`: the entry field whose value is the ordering key; `key_fields`: (stream
    pattern, field) pairs, the first pattern matching a stream (fnmatch) wins over
    `key_field` ("" there: that stream unordered); `missing_key`: an entry without the field
    is its own key (``own``), is held (``hold``) or dead-lettered (``dead_letter``);
    `dead_letter_releases`: a head dead-lettered releases its key (else the key is held
    behind it, recorded in a hash named by `hold_prefix`: ``recovery.redis_io.key_holds``);
    `scan_max`: pending entries of other consumers read at most per consumer and unit for
    the keys they hold."""

    key_field: str | None = None
    key_fields: tuple[tuple[str, str], ...] = ()
    missing_key: str = "own"
    dead_letter_releases: bool = True
    scan_max: int = 10_000
    hold_prefix: str = "recovery:held:"

    def field_of(self, stream: str) -> str | None:
        """The key field of `stream`, or None where its entries are not ordered."""
        for pattern, name in self.key_fields:
            if fnmatchcase(stream, pattern):
                return name or None
        return self.key_field or None


@dataclass(frozen=True)
class JobParams:
    """Everything an executor needs for one run (no settings object, no secrets in repr)."""

    run_id: str
    redis: RedisParams
    min_idle_ms: int
    count: int
    max_deliveries: int
    dlq_suffix: str
    dlq_batch_size: int
    handler_path: str
    handler_batch_size: int
    max_entries_per_s_per_partition: float | None = None
    handler_timeout_s: float | None = None
    # handler.dead_letter_exceptions: exception classes, package.module.ClassName, that mean
    # Result.dead_letter for the message that raised them (recovery.handlers.load_exceptions).
    handler_dead_letter_exceptions: tuple[str, ...] = ()
    reprocess_mode: str = "handler"  # a vocabulary.Mode value (recovery.settings.reprocess)
    # That mode's own settings (key, value), e.g. ("requeue_stream", None): ``mode_option``.
    mode_options: tuple[tuple[str, Any], ...] = ()
    dlq_stream: str | None = None  # the dead-letter stream's template; None: the slot rule
    consumer_prefix: str = "recovery"  # the job's consumers, never reassigned to
    # A run that applies a plan (--plan): tasks get PLANNED rows and claim those IDs with
    # XCLAIM (min_idle_ms and max_deliveries are then the plan's).
    planned: bool = False
    backoff_factor: float | None = None  # None or 1: no schedule (XAUTOCLAIM, as always)
    backoff_max_ms: int | None = None  # the longest wait of the schedule; None: no cap
    # The move script also checks a dead-letter stream's newest entry (XINFO STREAM): set by
    # the driver where discovery could run XINFO STREAM (older ACL rules do not grant it).
    dlq_check_newest: bool = False
    order: OrderParams | None = None  # per-key ordered hand-over (order.*); None: off
    # reprocess.delete_acked: ack with XACKDEL ... ACKED (the driver checked the server has it)
    delete_acked: bool = False
    # What the server offers (recovery.redis_io.features.ServerFeatures, a frozen dataclass
    # of plain values), probed once by the driver; None before the probe. Typed loosely here:
    # this floor sits below recovery.redis_io.
    features: object | None = None
    # The scheduler's own id of the run (--scheduler-run-id, e.g. Airflow's DAG run id, in
    # full): on every row of the report; None when not given.
    scheduler_run_id: str | None = None

    def mode_option(self, key: str) -> Any:
        """The value of `key`, one of the re-processing mode's own settings
        (``reprocess.<key>``); KeyError for a key the mode does not have."""
        return dict(self.mode_options)[key]

    @property
    def backoff(self) -> bool:
        """Whether the claim follows a backoff schedule (``recovery.executor.claim.backoff``)."""
        return self.backoff_factor is not None and self.backoff_factor > 1


@dataclass(frozen=True)
class Unit:
    """One stream and group of a run, with the job's consumer that claims for it
    (``<prefix>-<run id>-<part>``): what a partition works on, and what a batch's rows are
    grouped by. The driver makes them (``recovery.driver.discovery.assign``); they reach the
    executors as UNIT rows and become Units again there (``recovery.executor.partitions``).

    `cursor`: for a unit split over several parts (a big PEL: ``recovery.driver.split``),
    the key of the cursor its parts claim it with, step after step (``claim_due.lua``);
    None for a unit one part claims whole."""

    stream: str
    group: str
    consumer: str
    cursor: str | None = None


@dataclass(frozen=True)
class DeadLetterReadParams:
    """What the executors of a dead-letter read need (``recovery.dead_letters.read``):
    the connection and the XRANGE page size (entries per reply)."""

    redis: RedisParams
    page: int = 1000


def new_run_id() -> str:
    """A sortable, unique run id: UTC time plus 6 hex digits."""
    return datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ") + "-" + secrets.token_hex(3)


def is_job_consumer(name: str, stem: str) -> bool:
    """True for a consumer named `stem` (``<prefix>-<run id>-``, one run's) followed by a
    part number: one of that run's job consumers (a name that only starts with `stem`
    belongs to another run whose ID extends this one's)."""
    return name.startswith(stem) and name[len(stem):].isdigit()
