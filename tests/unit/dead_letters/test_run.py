"""The dead-letter job's run (recovery.dead_letters.run): its dead-letter streams cut into
Spark parts, each part the keys of one node only (a task reads one server), the biggest
first, no part over its share. Pure (the whole job against real servers:
tests/unit/dead_letters/test_read.py)."""

from __future__ import annotations

from recovery.dead_letters.run import key_parts
from recovery.targets.dead_letter_streams import DeadLetterStream


def test_parts_hold_keys_of_one_node_biggest_first():
    streams = [DeadLetterStream(f"s{i}", f"{{s{i}}}:dlq", "stream", n, 1, node)
               for i, (n, node) in enumerate([(50, "a"), (40, "a"), (5, "a"), (30, "b")])]
    parts = key_parts(streams, 3)
    assert [[k["dead_letter_key"] for k in part] for part in parts] == [
        ["{s0}:dlq"], ["{s1}:dlq", "{s2}:dlq"], ["{s3}:dlq"]]
