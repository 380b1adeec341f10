"""What the run checks of its Spark application before it starts (recovery.driver.job):
speculation is refused with the fix, and the one pass is taken only where no task can run
twice (recovery.driver.passes)."""

from __future__ import annotations

import pytest

from recovery.errors import ConfigError
from recovery.spark.tasks import check_no_speculation, retries_tasks


@pytest.mark.parametrize("value", ["true", "TRUE", " true "])
def test_speculation_is_refused_with_the_fix(value):
    with pytest.raises(ConfigError, match=r"--conf spark\.speculation=false"):
        check_no_speculation(value)


@pytest.mark.parametrize("value", ["false", None, ""])
def test_no_speculation_passes(value):
    check_no_speculation(value)


@pytest.mark.parametrize(("master", "retried"), [
    ("local", False), ("local[2]", False), ("local[*]", False), ("local[2,1]", False),
    ("local[2,3]", True), ("local[*, 4]", True), ("local-cluster[2,1,1024]", True),
    ("yarn", True), ("spark://host:7077", True), ("k8s://https://host:6443", True), ("", True),
])
def test_one_pass_only_where_no_task_can_run_twice(master, retried):
    """The one pass (no materialised claim) is taken only when retries_tasks is False."""
    assert retries_tasks(master) is retried
