"""What the materialised claim's note of the IDs its steps counted costs
(``recovery.executor.claimed_ids.ClaimedIds``): memory held and time for one unit of
1,000,000 entries claimed in steps of 1,000, and the time of the read of what the claim left
when its foreign rows fall in every step. Pure Python, no Redis:

    .venv/bin/python -m tests.benchmark.claimed_ids
"""

from __future__ import annotations

import sys
import time
import tracemalloc

from recovery.executor.claimed_ids import ClaimedIds

ENTRIES, STEP, BASE_MS = 1_000_000, 1_000, 1_764_694_000_000


def step_ids() -> list[list[bytes]]:
    """IDs as Redis sends them (three entries a millisecond), cut into claim steps."""
    ids = [f"{BASE_MS + i // 3}-{i % 3}".encode() for i in range(ENTRIES)]
    return [ids[s : s + STEP] for s in range(0, ENTRIES, STEP)]


def noted(steps: list[list[bytes]]) -> tuple[ClaimedIds, float, int]:
    """The steps' IDs noted: the note, seconds taken, bytes it holds."""
    tracemalloc.start()
    started = time.perf_counter()
    claimed = ClaimedIds()
    for ids in steps:
        claimed.add(ids)
    seconds = time.perf_counter() - started
    held, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return claimed, seconds, held


def main() -> int:
    steps = step_ids()
    claimed, seconds, held = noted(steps)
    print(f"noted {ENTRIES:,} IDs in {len(steps):,} steps: {seconds:.2f} s "
          f"(under tracemalloc), {held / 1e6:.1f} MB held")
    probes = [ids[0] for ids in steps] + [ids[-1][:-1] + b"9" for ids in steps]
    started = time.perf_counter()
    found = sum(map(claimed.holds, probes))
    print(f"{len(probes):,} lookups, one step's IDs opened each: "
          f"{time.perf_counter() - started:.2f} s ({found:,} held)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
