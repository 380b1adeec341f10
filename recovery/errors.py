"""Typed errors of the recovery job, each mapped to an exit code.

Every error carries a one-line message that names the problem and the fix; the entry point
prints exactly that line, never a stack trace.
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_BAD_INPUT = 2


class RecoveryError(Exception):
    """Base class: a failure the job can explain in one line."""

    exit_code = EXIT_FAILURE


class ConfigError(RecoveryError):
    """The config file, environment or arguments are invalid (exit 2)."""

    exit_code = EXIT_BAD_INPUT


class HeldElsewhereError(ConfigError):
    """Keys are held behind dead letters in hashes this run would not read (another
    ``order.hold_prefix``, or the names earlier versions gave them): refused before anything
    is claimed, with the commands that move them (exit 2)."""


class RedisUnavailableError(RecoveryError):
    """Redis cannot be reached, or refused the connection (exit 1)."""


class RedisAuthError(RecoveryError):
    """Redis refused the credentials (exit 1)."""


class RedisPermissionError(RecoveryError):
    """The ACL user may not run a command the job needs (exit 1)."""


class UnsupportedServerError(RecoveryError):
    """The server is too old for XAUTOCLAIM (needs Redis 6.2 or newer)."""


class StreamUnitError(RecoveryError):
    """One (stream, group) unit cannot be processed; other units go on.

    `kind` is a short stable code for the report: ``no-group``, ``wrong-type``, ``no-key``.
    """

    def __init__(self, kind: str, stream: str, group: str | None, detail: str) -> None:
        self.kind = kind
        self.stream = stream
        self.group = group
        super().__init__(f"{stream}" + (f" / {group}" if group else "") + f": {detail}")


class DeadLetterNameError(RecoveryError):
    """No dead-letter key in the source's hash slot can be derived for a key."""

    exit_code = EXIT_BAD_INPUT


class HandlerError(RecoveryError):
    """The configured handler cannot be imported or is not callable (exit 2)."""

    exit_code = EXIT_BAD_INPUT


class EmptySelectionError(RecoveryError):
    """The selection matched no stream with a selected group and ``streams.fail_when_empty``
    is on (exit 1)."""


class FailureThresholdError(RecoveryError):
    """More messages failed in the handler than the configured threshold allows (exit 1)."""


# The start of a report row's reason when its unit's dead-letter stream was refused (not the
# job's to write: recovery.executor.handover.dead_letter); the tallies gather those units.
# Here, not in recovery.schemas, so the Redis layer names them without importing pyarrow
# (the executors' daemon preloads recovery.redis_io before it forks).
TARGET_REFUSED = "dead-letter stream refused: "
# The same for a requeue target (``reprocess.requeue_stream``) of another type.
REQUEUE_REFUSED = "requeue stream refused: "
