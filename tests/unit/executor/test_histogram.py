"""PEL histograms counted on the executors (recovery.executor.histogram.PelHistogram): a
delivery count at the int64 maximum, or wrapped negative past it by a claim, falls in the
top bucket (never in "1", never an error). Pure."""

from __future__ import annotations

from recovery.counts import INT64_MAX
from recovery.executor.histogram import PelHistogram


def test_pel_histograms_bucket_counts_at_and_wrapped_past_the_maximum():
    histogram = PelHistogram()
    histogram.add([[b"1-0", b"c", 5, -(2**63)], [b"2-0", b"c", -1, INT64_MAX],
                   [b"3-0", b"c", 7, 1], [b"4-0", b"c", 7, -1]])
    assert dict(histogram.row("s", "g")["deliveries"]) == {">100": 3, "1": 1}
