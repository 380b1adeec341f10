"""What a task sets around its partition (recovery.executor.partitions): the garbage
collector's young generation collected more rarely while it runs, as before afterwards."""

from __future__ import annotations

import gc

import pytest

from recovery.executor.partitions import young_collections_rarer


def test_young_collections_rarer_while_a_task_runs_then_as_before():
    before = gc.get_threshold()
    with young_collections_rarer(12_345):
        assert gc.get_threshold() == (12_345, *before[1:])
    assert gc.get_threshold() == before
    with pytest.raises(RuntimeError), young_collections_rarer(777):
        raise RuntimeError("a failed task")
    assert gc.get_threshold() == before  # a reused worker gets its setting back
