"""The words a run's outcome is told in, shared by the settings, the command line, the
executors and the report: where a claimed entry goes (:class:`Route`), what happened to it
(:class:`Action`, the report's ``action`` column), why it was dead-lettered
(:class:`DeathReason`, its ``x-death-reason``), how the rest is re-processed (:class:`Mode`),
and the fixed texts and field names that go with them.

Plain ``str`` Enums and constants, nothing else imported: the settings and the command line
load them without Spark or Arrow (``recovery.schemas`` re-exports them beside the schemas).
"""

from __future__ import annotations

from enum import StrEnum


class Route(StrEnum):
    """Where a claimed entry goes (``recovery.executor.handover.routed.route``)."""

    HANDLE = "handle"  # re-processed: by the handler, requeued or reassigned
    DEAD_LETTER = "dead_letter"
    DELETED = "deleted"  # deleted upstream: reported, its PEL slot cleared
    GONE = "gone"  # no longer the job's


class Action(StrEnum):
    """What happened to an entry (REPORT.action): a run's actions, then a dry run's."""

    REPROCESSED = "reprocessed"
    DEAD_LETTERED = "dead_lettered"
    FAILED = "failed"
    DELETED = "deleted"
    SKIPPED = "skipped"
    REQUEUED = "requeued"
    REASSIGNED = "reassigned"
    # Per-key order (order.key_field): left pending behind an older entry of its key that
    # failed, or is pending elsewhere (its reason names that entry's ID).
    HELD = "held"
    WOULD_REPROCESS = "would_reprocess"
    WOULD_DEAD_LETTER = "would_dead_letter"
    WOULD_REQUEUE = "would_requeue"
    WOULD_REASSIGN = "would_reassign"
    # A dry run's per-key order (order.dead_letter_releases = false): after an entry of its
    # key that is held already, or that the run would dead-letter (its reason names it).
    WOULD_HOLD = "would_hold"


# The reason of a `skipped` row whose dead-letter move the job cannot tell from another
# consumer's ack (its call was sent again after a lost reply: recovery.executor.handover.resent)
# starts so; the run's summary warns of them (recovery.report.signatures.uncertain_warning).
UNCERTAIN_REASON_PREFIX = "uncertain: "


class DeathReason(StrEnum):
    """Why an entry was dead-lettered (its ``x-death-reason``)."""

    OVER_LIMIT = "max-deliveries-exceeded"
    FAILED_AT_LIMIT = "handler-failed-at-limit"
    REJECTED = "handler-rejected"  # the handler's Result.dead_letter: never retried
    # A delivery count at the largest 64-bit integer: Redis 8.8's XNACK ... FATAL (or a
    # counter that wrapped), never retried.
    MAX_COUNT = "delivery-count-at-maximum"
    # Per-key order with order.missing_key = dead_letter: an entry without the key field.
    NO_ORDER_KEY = "order-key-missing"


class Mode(StrEnum):
    """How entries that are not dead-lettered are re-processed (``reprocess.mode``): the
    values the settings accept, the first the default. A mode is registered here, once;
    its object, with every hook the job calls for it (its actions, report columns, checks,
    executor step), is ``MODE`` in the module of that name in
    ``recovery/executor/handover/modes/``, which also makes the summary's action columns
    (``ACTIONS``, ``PLAN_ACTIONS``); its settings, where it has keys of its own, are its
    class in ``recovery.settings.reprocess``."""

    HANDLER = "handler"
    REQUEUE = "requeue"
    REASSIGN = "reassign"


# The field a requeued copy carries: how often the original was delivered to the
# application before (its PEL count without the job's claim, plus what it carried itself).
CARRIED_DELIVERIES = b"x-recovery-deliveries"
