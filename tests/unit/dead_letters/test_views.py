"""The dead-letter job's views (recovery.dead_letters.views): an error's signature keeps
its words and collapses what varies from one letter to the next (numbers, entry IDs, quoted
values, hex, UUIDs, runs of spaces); no error, no signature. Through a real Spark."""

from __future__ import annotations

import pytest

from recovery.dead_letters.views import signature


@pytest.mark.slow
def test_signatures_collapse_what_varies(spark):
    messages = ["timeout after 3012 ms on order 88", "timeout after 17 ms on order 5",
                "refused 1700000000000-12", "bad value \"x 1\" at 0x1F",
                "lost c0ffee12deadbeef99 and 3f2504e0-4f89-11d3-9a0c-0305e82c3301", None,
                "plain   words"]
    df = spark.createDataFrame([(m,) for m in messages], "m string")
    got = [r[0] for r in df.select(signature(df.m)).collect()]
    assert got == ["timeout after <n> ms on order <n>", "timeout after <n> ms on order <n>",
                   "refused <id>", "bad value <str> at <hex>", "lost <hex> and <uuid>", None,
                   "plain words"]
