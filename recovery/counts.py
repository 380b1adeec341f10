"""Counts read from outside the run, parsed defensively: field values of entries (a requeued
copy's carried deliveries, a dead letter's x- numbers) and PEL delivery counts. Pure, no I/O;
both sides import it (executors, the dead-letter reader, the driver).

A field value is whatever some producer wrote. It is a count only when it is ASCII digits
(no sign, space, underscore, point or exponent; not the digits of other scripts, which
``str.isdigit`` and ``int`` accept) no greater than a bound; anything else is no count, and
the caller gives it a defined outcome (docs/GUARANTEES.md). A PEL delivery count comes from
Redis but need not be small: XNACK FATAL (Redis 8.8) sets it to the int64 maximum, and a
claim's +1 past that wraps it negative; such counts read as the maximum (``saturated``), so
they route to the dead-letter stream and fit the report's int64 column.
"""

from __future__ import annotations

INT64_MAX = 2**63 - 1  # the report's delivery_count column (int64); Redis' largest count
MAX_CARRIED = 2**31 - 1  # the largest sane carried delivery count (x-recovery-deliveries)


def count_of(value: bytes | str | None, bound: int = INT64_MAX) -> int | None:
    """`value` as a count in [0, `bound`], or None when it is none (absent, empty, not
    ASCII digits, above `bound`). Never raises, whatever its length."""
    if value is None:
        return None
    if isinstance(value, str):
        if not value.isascii():
            return None
        value = value.encode("ascii")
    if not value.isdigit():  # bytes.isdigit: ASCII digits only, False when empty
        return None
    digits = value.lstrip(b"0")
    if len(digits) > len(str(bound)):  # before int(): no conversion of thousands of digits
        return None
    count = int(digits or b"0")
    return count if count <= bound else None


def saturated(count: int) -> int:
    """A PEL delivery count as the int64 report column holds it: at most ``INT64_MAX``; a
    negative count (the server's counter wrapped past its maximum) as ``INT64_MAX``."""
    return INT64_MAX if count < 0 or count > INT64_MAX else count


def saturate_all(counts: list[int | None]) -> None:
    """``saturated`` on every count of `counts` (None stays None), in place; a scan in C
    first, as counts out of range are rare."""
    present: list[int] = ([c for c in counts if c is not None] if None in counts
                          else counts)  # type: ignore[assignment]
    if not present or (min(present) >= 0 and max(present) <= INT64_MAX):
        return
    for i, count in enumerate(counts):
        if count is not None:
            counts[i] = saturated(count)
