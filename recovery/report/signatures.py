"""Error signatures: what a failed entry's error or a dead letter's exception message says,
with what varies from one occurrence to the next replaced, so that a thousand failures of one
cause count as one line. No I/O here.

A signature is the message with, in this order: quoted values (``<str>``), UUIDs
(``<uuid>``), stream IDs ``<ms>-<seq>`` (``<id>``), hex numbers (``0x..``, or 8+ hex digits
holding a digit and a letter: ``<hex>``), numbers (``<n>``) replaced; runs of white space
become one space. So "timeout after 3012 ms on order 88" and "timeout after 17 ms on order
5" are both "timeout after <n> ms on order <n>".
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from recovery.report.signature_rules import SIGNATURE_RULES
from recovery.rows import FailedErrors
from recovery.schemas import Action

TOP_FAILED_ERRORS = 10  # signatures of failed entries a run's summary lists at most


def signature(message: Column) -> Column:
    """The signature of an exception message column (null stays null); the same rules as
    :func:`recovery.report.signature_rules.signature_text` applies to one string."""
    for pattern, placeholder in SIGNATURE_RULES:
        message = F.regexp_replace(message, pattern, placeholder)
    return F.trim(message)


def failed_errors(report: DataFrame, top: int = TOP_FAILED_ERRORS) -> list[FailedErrors]:
    """The run's failed entries (REPORT rows with action ``failed``) by reason and error
    signature, most first, at most `top` (``example``: one of its error texts as written;
    ``signature`` None where the entry has no error text). One Spark job over the run's
    report."""
    failed = report.where(F.col("action") == Action.FAILED.value)
    grouped = (failed.groupBy("reason", signature(F.col("error")).alias("signature"))
               .agg(F.count(F.lit(1)).alias("entries"), F.min("error").alias("example"))
               .orderBy(F.desc("entries"), "reason", "signature").limit(top))
    return [FailedErrors(**row.asDict()) for row in grouped.collect()]


def failed_warning(run_id: str, failed: int, errors: list[FailedErrors]) -> str:
    """The WARNING line of a run whose entries failed: how many, and the first signatures
    with their counts (the summary's ``failed_errors`` has them all)."""
    shown = "; ".join(f"{e.entries:,} x {e.signature or e.reason}" for e in errors[:3])
    return (f"run {run_id}: {failed:,} entries failed (they stay pending and are retried by "
            f"the next run, dead-lettered past claim.max_deliveries): {shown}")


def uncertain_warning(run_id: str, entries: int) -> str:
    """The WARNING line (and summary warning) of a run with uncertain moves: a dead-letter,
    requeue or reassign call sent again after its reply was lost."""
    return (f"run {run_id}: {entries:,} entries reported skipped as uncertain: a dead-letter, "
            "requeue or reassign call was sent again after its reply was lost, and the job "
            "cannot tell whether that call or another consumer took them; each row's reason "
            "says where to look (docs/GUARANTEES.md, Retries)")
