"""Dead-letter and retry stream names (recovery.redis_io.dlq_names): each shares its source
stream's hash slot, and a name that cannot is refused."""

from __future__ import annotations

import pytest
from redis.crc import key_slot

from recovery.errors import DeadLetterNameError
from recovery.redis_io.dlq_names import DeadLetterNames, dead_letter_key, name_clash, requeue_key


@pytest.mark.parametrize(("source", "dlq"), [
    ("orders", "{orders}:dlq"),
    ("orders{eu}", "orders{eu}:dlq"),
    ("a{b}c{d}", "a{b}c{d}:dlq"),
    ("x{}y", None),          # empty tag: the whole key hashes, and it has a '}'
    ("a}b", None),
    ("a{b", "{a{b}:dlq"),
])
def test_dead_letter_key_shares_the_slot(source, dlq):
    if dlq is None:
        with pytest.raises(DeadLetterNameError):
            dead_letter_key(source, ":dlq")
    else:
        assert dead_letter_key(source, ":dlq") == dlq
        assert key_slot(dlq.encode()) == key_slot(source.encode())


@pytest.mark.parametrize(("source", "target"), [
    ("orders", "{orders}:retry:billing"),
    ("orders{eu}", "orders{eu}:retry:billing"),
    ("a}b", None),  # no name can share its slot: refused, as its dead-letter name is
])
def test_retry_streams_share_the_slot_by_the_dead_letter_rule(source, target):
    assert requeue_key(source, "billing", None) == source
    if target is None:
        with pytest.raises(DeadLetterNameError):
            requeue_key(source, "billing", "{stream}:retry:{group}")
    else:
        assert requeue_key(source, "billing", "{stream}:retry:{group}") == target
        assert key_slot(target.encode()) == key_slot(source.encode())


@pytest.mark.parametrize(("template", "keys", "groups", "requeue", "fragment"), [
    ("payments", ["orders", "payments"], [], None, "names the selected source 'payments'"),
    ("{stream}:{group}", ["shop", "shop:eu"], ["eu"], None, "selected source 'shop:eu'"),
    ("{{{stream}}}:retry:{group}", ["shop"], [], "{stream}:retry:{group}",
     "both name '{shop}:retry:g'"),
    (None, ["shop"], [], "{stream}:dlq", "dead_letter.suffix ':dlq' and reprocess"),
    ("{stream}:{group}", ["shop", "shop:eu"], [], None, None),  # groups unknown: discovery's
    ("{stream}:{group}", ["shop"], [], "{stream}:retry:{group}", None),
    ("CDL", [], [], None, None),  # streams.match only: nothing to clash with yet
])
def test_a_name_clash_is_found_before_redis_is_read(template, keys, groups, requeue,
                                                    fragment):
    clash = name_clash(DeadLetterNames(":dlq", template), keys, groups, requeue)
    if fragment is None:
        assert clash is None
    else:
        assert clash is not None and fragment in clash
