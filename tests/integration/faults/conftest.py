"""Fixtures of the fault trials: spark-submit runs killed when a test ends (small Arrow
batches, ``small_batches``, are in tests/conftest.py, beside ``faults``)."""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.support.fault_tools import (
    kill_tree,
    spark_submit,
)


@pytest.fixture
def submit() -> Iterator[Callable[..., subprocess.Popen[bytes]]]:
    """spark_submit, and SIGKILL of whatever is still running when the test ends (a failed
    assertion or pytest-timeout must not leave a job behind)."""
    started: list[subprocess.Popen[bytes]] = []

    def _submit(*args: Any, **kwargs: Any) -> subprocess.Popen[bytes]:
        started.append(spark_submit(*args, **kwargs))
        return started[-1]

    yield _submit
    for proc in started:
        if proc.poll() is None:
            kill_tree(proc)
