"""PEL histograms counted on the executors (recovery.executor.histogram.PelHistogram): a
delivery count at the int64 maximum, or wrapped negative past it by a claim, falls in the
top bucket (never in "1", never an error); the read of what a claim left skips the rows
its steps counted (recovery.executor.claimed_ids.ClaimedIds). Pure."""

from __future__ import annotations

from recovery.counts import INT64_MAX
from recovery.executor.claimed_ids import ClaimedIds
from recovery.executor.histogram import PelHistogram


def test_pel_histograms_bucket_counts_at_and_wrapped_past_the_maximum():
    histogram = PelHistogram()
    histogram.add([[b"1-0", b"c", 5, -(2**63)], [b"2-0", b"c", -1, INT64_MAX],
                   [b"3-0", b"c", 7, 1], [b"4-0", b"c", 7, -1]])
    assert dict(histogram.row("s", "g")["deliveries"]) == {">100": 3, "1": 1}


def test_the_read_of_what_the_claim_left_skips_the_rows_the_steps_counted():
    """A row of an entry a step counted, owned by another consumer by the read of what the
    claim left (a live consumer took it), is not counted again; the others are."""
    histogram = PelHistogram()
    histogram.claimed = ClaimedIds()
    histogram.add_claimed([[b"1-0", b"dead", 7_200_000, 1], [b"3-0", b"dead", 7_200_000, 1]])
    histogram.add_unclaimed([[b"1-0", b"live", 5, 3], [b"2-0", b"live", 9, 2]])
    assert dict(histogram.row("s", "g").deliveries) == {"1": 2, "2": 1}
