"""Fault injection for tests: inert unless RECOVERY_FAULT_FILE names a file.

The file holds lines ``<stage> <step> <attempt>``: raise InjectedFault at `stage`
(``claim``, ``apply``; ``ordered``: a wave of the per-key ordered hand-over) on the
`step`-th step of a task whose attempt number is
`attempt`. Spark task retries (``local[N,F]``) then run the task again, which is what the
tests check. Each fault that fires first appends its line to ``<file>.fired`` (FIRED_SUFFIX),
so a test can prove its fault happened. Production runs never set the variable.
"""

from __future__ import annotations

import os

FIRED_SUFFIX = ".fired"


class InjectedFault(RuntimeError):
    """Raised where a test asked for a failure."""


def maybe_fail(stage: str, step: int) -> None:
    """Raise InjectedFault if the fault file asks for `stage` at `step` in this attempt."""
    path = os.environ.get("RECOVERY_FAULT_FILE")
    if not path or not os.path.exists(path):
        return
    from pyspark import TaskContext

    ctx = TaskContext.get()
    attempt = ctx.attemptNumber() if ctx else 0
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            parts = line.split()
            if len(parts) == 3 and parts[0] == stage and int(parts[1]) == step \
                    and int(parts[2]) == attempt:
                _mark_fired(path, f"{stage} {step} {attempt}")
                raise InjectedFault(f"injected fault at {stage} step {step} attempt {attempt}")


def _mark_fired(path: str, line: str) -> None:
    """Append `line` to the fired marker (one short O_APPEND write: whole even when several
    Python workers fire at once)."""
    fd = os.open(path + FIRED_SUFFIX, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)
