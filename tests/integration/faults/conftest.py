"""Fixtures of the fault trials: spark-submit runs killed when a test ends, and
small Arrow batches so a run has many steps to fail between."""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from pyspark.sql import SparkSession

from tests.support.fault_checks import SMALL_BATCHES
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


@pytest.fixture
def small_batches(spark: SparkSession) -> Iterator[None]:
    """Apply works in Arrow batches of 20 rows, so a run has many steps to fail between."""
    key, value = SMALL_BATCHES.split("=")
    spark.conf.set(key, value)
    yield
    spark.conf.unset(key)
