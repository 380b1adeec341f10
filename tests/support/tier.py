"""The quick tier's rule (``make test-fast``): a test that runs the whole job is marked slow.

tests/conftest.py tells :func:`enter` whether the test about to run is marked ``slow``; the
ways the tests run the whole job ask :func:`require_slow` first: ``recovery.driver.job.run``
in the test's own process (conftest puts it behind :func:`slow_only`) and
``tests.support.fault_tools.spark_submit``. A whole run takes seconds (a Spark pass, or a
JVM started), so without its mark the quick tier grows past its two minutes unseen.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import pytest

_current = {"slow": True}  # outside a pytest run (a script importing the helpers): allowed


def enter(slow: bool) -> None:
    """Record whether the test about to run is marked ``slow``."""
    _current["slow"] = slow


def require_slow(what: str) -> None:
    """Fail the running test unless it is marked slow; `what` names the whole run."""
    if not _current["slow"]:
        pytest.fail(f"{what} in a test not marked slow: mark it @pytest.mark.slow "
                    "(make test-fast leaves out whole runs; docs/DESIGN.md, Tests)",
                    pytrace=False)


def slow_only(run: Callable[..., Any], what: str) -> Callable[..., Any]:
    """`run`, asking :func:`require_slow` (with `what`) before each call."""
    @functools.wraps(run)
    def checked(*args: Any, **kwargs: Any) -> Any:
        require_slow(what)
        return run(*args, **kwargs)
    return checked
