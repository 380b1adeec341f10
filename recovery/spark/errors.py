"""A failed Spark action mapped back to the job's own error: the typed RecoveryError an
executor raised, found in the text Spark carries back (exit codes: ``recovery.errors``)."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator

import recovery.errors as errors
from recovery.errors import RecoveryError

TYPED_ERROR = re.compile(r"recovery\.errors\.(\w+): ([^\n]+)")
PYTHON_ERROR = re.compile(r"^[\w.]+(?:Error|Exception|Fault): [^\n]+", re.MULTILINE)


@contextlib.contextmanager
def spark_errors() -> Iterator[None]:
    """Turn a failed Spark action back into the typed error raised on the executor."""
    try:
        yield
    except RecoveryError:
        raise
    except Exception as exc:
        raise from_spark_error(exc) from None


def from_spark_error(exc: Exception) -> RecoveryError:
    """The executor's RecoveryError, if the Spark error carries one; else a generic one."""
    text = str(exc)
    match = TYPED_ERROR.search(text)
    if match:
        cls = getattr(errors, match.group(1), RecoveryError)
        if isinstance(cls, type) and issubclass(cls, RecoveryError):
            return cls(match.group(2).strip())
    cause = PYTHON_ERROR.search(text)
    first = next((line.strip() for line in text.splitlines() if line.strip()), type(exc).__name__)
    detail = cause.group(0).strip() if cause else first
    return RecoveryError(f"the Spark job failed: {detail[:500]}")
