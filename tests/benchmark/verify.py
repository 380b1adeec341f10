"""After every run, check in Redis itself that every seeded entry was recovered exactly once.

- the group's PEL holds none of the seeded entries (each was acked or dead-lettered), but
  those seeded not due under the job's backoff schedule, exactly as seeded;
- every source stream still holds all its entries (nothing deleted), plus one copy of each
  acked entry when the job requeued them (``reprocess.mode=requeue``);
- each stream's DLQ holds exactly the over-limit entries, each once (by ``x-original-id``),
  with their original fields verbatim and the right ``x-original-stream`` / ``-group``;
- the database holds no other keys (no stray dead-letter streams).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass

import redis

from recovery.redis_io.dlq_names import dead_letter_key
from tests.benchmark.loops import DLQ_SUFFIX
from tests.benchmark.seed import SeededBacklog

PIPELINE = 100
MAX_PROBLEMS_SHOWN = 5


class VerificationError(AssertionError):
    """Redis does not hold what an exactly-once recovery leaves behind."""


@dataclass(frozen=True)
class Outcome:
    """Where the seeded entries ended up, counted in Redis."""

    acked: int
    dead_lettered: int


def _chunks(items: list[str], size: int) -> Iterator[list[str]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def _pel_and_length(client: redis.Redis, seeded: SeededBacklog, requeued: bool) -> list[str]:
    """Problems with the PELs and the streams' lengths: each stream holds what was seeded,
    and with `requeued` one copy more of each entry that was not over the limit."""
    spec, problems = seeded.spec, []
    for names in _chunks(spec.stream_names(), PIPELINE):
        pipe = client.pipeline(transaction=False)
        for name in names:
            pipe.xpending(name, spec.group)
            pipe.xlen(name)
        replies = pipe.execute()
        for name, pending, length in zip(names, replies[::2], replies[1::2], strict=True):
            if pending["pending"] != len(seeded.not_due.get(name, [])):
                problems.append(f"{name}: {pending['pending']} entries still pending, "
                                f"{len(seeded.not_due.get(name, []))} seeded not due")
            copies = spec.per_stream - len(seeded.over_limit.get(name, [])) if requeued else 0
            if length != spec.per_stream + copies:
                problems.append(f"{name}: {length} entries, seeded {spec.per_stream}"
                                f" and {copies} requeued")
    return problems


def _dead_letters(client: redis.Redis, seeded: SeededBacklog) -> tuple[int, list[str]]:
    """(entries in all DLQs, problems) for every stream of the backlog."""
    spec, problems, total = seeded.spec, [], 0
    for names in _chunks(spec.stream_names(), PIPELINE):
        pipe = client.pipeline(transaction=False)
        for name in names:
            pipe.xrange(dead_letter_key(name, DLQ_SUFFIX))
        for name, entries in zip(names, pipe.execute(), strict=True):
            total += len(entries)
            problems += _check_dlq(client, seeded, name, [f for _, f in entries])
    return total, problems


def _check_dlq(client: redis.Redis, seeded: SeededBacklog, stream: str,
               dead: list[dict[bytes, bytes]]) -> list[str]:
    group = seeded.spec.group.encode()
    ids = Counter(f.get(b"x-original-id", b"?").decode() for f in dead)
    problems = [f"{stream}: {i} dead-lettered {n} times" for i, n in ids.items() if n > 1]
    expected = set(seeded.over_limit[stream])
    if set(ids) != expected:
        problems.append(f"{stream}: DLQ holds {sorted(set(ids) - expected)[:3]} not over the "
                        f"limit, misses {sorted(expected - set(ids))[:3]}")
    if any(f.get(b"x-original-stream") != stream.encode() or f.get(b"x-original-group") != group
           for f in dead):
        problems.append(f"{stream}: a DLQ entry names the wrong source stream or group")
    return problems + _check_fields(client, stream, dead)


def _check_fields(client: redis.Redis, stream: str, dead: list[dict[bytes, bytes]]
                  ) -> list[str]:
    """Each dead letter carries its source entry's fields verbatim."""
    pipe = client.pipeline(transaction=False)
    for fields in dead:
        entry_id = fields.get(b"x-original-id", b"0-0")
        pipe.xrange(stream, entry_id, entry_id)
    problems = []
    for fields, source in zip(dead, pipe.execute(), strict=True):
        original = {k: v for k, v in fields.items() if not k.startswith(b"x-")}
        if not source or source[0][1] != original:
            problems.append(f"{stream}: DLQ entry {fields.get(b'x-original-id')!r} lost or "
                            "changed the original fields")
    return problems


def _stray_keys(client: redis.Redis, seeded: SeededBacklog) -> list[str]:
    spec = seeded.spec
    expected = spec.streams + sum(1 for ids in seeded.over_limit.values() if ids)
    size = int(client.dbsize())
    return [] if size == expected else [f"{size} keys in the database, expected {expected}"]


def verify_recovered(client: redis.Redis, seeded: SeededBacklog, requeued: bool = False
                     ) -> Outcome:
    """Raise VerificationError unless every seeded entry was acked or dead-lettered once
    (and, `requeued`, each acked one copied once into its stream)."""
    problems = _pel_and_length(client, seeded, requeued)
    dead_lettered, dlq_problems = _dead_letters(client, seeded)
    problems += dlq_problems + _stray_keys(client, seeded) + _not_due_untouched(client, seeded)
    if problems:
        shown = "; ".join(problems[:MAX_PROBLEMS_SHOWN])
        raise VerificationError(f"{len(problems)} problems after the run: {shown}")
    return Outcome(seeded.spec.messages - dead_lettered - seeded.not_due_total, dead_lettered)


def _not_due_untouched(client: redis.Redis, seeded: SeededBacklog) -> list[str]:
    """The entries seeded not due are still pending with the seed's consumer, with the
    delivery count they were seeded with (the claim left them alone)."""
    spec, problems = seeded.spec, []
    for name, ids in seeded.not_due.items():
        if not ids:
            continue
        rows = client.xpending_range(name, spec.group, ids[0], ids[-1], len(ids))
        found = {r["message_id"].decode(): (r["consumer"].decode(), r["times_delivered"])
                 for r in rows}
        wanted = (spec.consumer, spec.not_due_deliveries)
        if found != dict.fromkeys(ids, wanted):
            problems.append(f"{name}: entries seeded not due were claimed or changed")
    return problems
