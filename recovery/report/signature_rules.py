"""The rules of an error signature (:mod:`recovery.report.signatures`) and their plain-Python
form, for code that has one message in hand and no Spark (the dead-letter console). No I/O.

Both forms apply the same regular expressions in the same order; Spark's are Java's, and these
patterns mean the same in both.
"""

from __future__ import annotations

import re

SIGNATURE_RULES: tuple[tuple[str, str], ...] = (
    (r"'[^']*'|\"[^\"]*\"", "<str>"),
    (r"(?i)\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b", "<uuid>"),
    (r"\b\d+-\d+\b", "<id>"),
    (r"\b0[xX][0-9a-fA-F]+\b", "<hex>"),
    (r"\b(?=[0-9a-fA-F]*\d)(?=[0-9a-fA-F]*[a-fA-F])[0-9a-fA-F]{8,}\b", "<hex>"),
    (r"\d+(?:\.\d+)?", "<n>"),
    (r"\s+", " "),
)
# ASCII: Java's \d, \s and \b (Spark's) are ASCII-only by default; Python's are not.
_COMPILED = tuple((re.compile(pattern, re.ASCII), placeholder)
                  for pattern, placeholder in SIGNATURE_RULES)


def signature_text(message: str | None) -> str | None:
    """The signature of one exception message (None stays None): quoted values, UUIDs, IDs,
    hex and numbers replaced by placeholders, white space runs as one space, trimmed."""
    if message is None:
        return None
    for pattern, placeholder in _COMPILED:
        message = pattern.sub(placeholder, message)
    return message.strip()
