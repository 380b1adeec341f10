"""Small pure pieces: dead-letter names, settings, handler replies, the throttle."""

from __future__ import annotations

import gc
from pathlib import Path

import pytest
from redis.crc import key_slot

from recovery.driver.discovery import WorkUnit, assign
from recovery.driver.job import check_no_speculation, retries_tasks
from recovery.errors import ConfigError, DeadLetterNameError
from recovery.executor.claim.throttle import Throttle
from recovery.executor.partitions import young_collections_rarer
from recovery.handlers import Result, normalise_reply
from recovery.redis_io.dlq_names import dead_letter_key, requeue_key
from recovery.settings.model import executor_params, load_settings
from recovery.settings.redis import redacted_url


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


def test_settings_precedence_file_then_env_then_cli(tmp_path: Path, monkeypatch):
    conf = tmp_path / "c.toml"
    conf.write_text('[streams]\nkeys = ["a"]\n[claim]\ncount = 10\nmax_deliveries = 3\n'
                    'min_idle_ms = 5\n')
    monkeypatch.setenv("RECOVERY_CLAIM__COUNT", "20")
    monkeypatch.setenv("RECOVERY_CLAIM__MAX_DELIVERIES", "4")
    s = load_settings(conf, ["claim.max_deliveries=7"])
    assert (s.claim.min_idle_ms, s.claim.count, s.claim.max_deliveries) == (5, 20, 7)


def test_password_in_url_moves_into_secret(tmp_path: Path):
    s = load_settings(None, ["streams.keys=a", "redis.url=redis://bob:p%40ss@h:7000/2"])
    assert s.redis.url == "redis://h:7000/2"
    assert s.redis.username == "bob"
    assert "p@ss" not in repr(s) and "p@ss" not in repr(executor_params(s, "r"))
    assert executor_params(s, "r").redis.password == "p@ss"
    assert redacted_url("redis://bob:p%40ss@h:7000/2") == "redis://bob:***@h:7000/2"


@pytest.mark.parametrize(("override", "names"), [
    ("claim.min_idle_ms=0", "claim.min_idle_ms"),
    ("claim.count=abc", "claim.count"),
    ("claim.bogus=1", "claim.bogus: unknown setting"),
    ("handler.path=not-a-path", "handler.path"),
    ("redis.url=http://x", "redis.url must look like"),
])
def test_bad_settings_name_the_field(override, names):
    with pytest.raises(ConfigError) as err:
        load_settings(None, ["streams.keys=a", override])
    assert names in str(err.value)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(("override", "keys"), [
    ("streams.keys=a,b", ["a", "b"]),
    ('streams.keys=["a", "b,c"]', ["a", "b,c"]),
    ("streams.keys=[]", []),
])
def test_list_settings_take_commas_or_a_toml_style_list(override, keys):
    s = load_settings(None, ["streams.match=x*", override])
    assert s.streams.keys == keys


@pytest.mark.parametrize("override", ['streams.keys=["a"', "streams.keys=[1]"])
def test_a_list_setting_that_does_not_parse_names_both_forms(override):
    with pytest.raises(ConfigError, match=r"write a list as a,b or as \["):
        load_settings(None, [override])


def test_empty_stream_selection_is_refused():
    with pytest.raises(ConfigError, match=r"set streams\.keys and/or streams\.match"):
        load_settings(None, [])


def test_handler_replies_are_normalised():
    assert normalise_reply([True, Result.failure("x")], 2) == [Result(True), Result(False, "x")]
    garbage = normalise_reply([True], 2)
    assert [r.ok for r in garbage] == [False, False]
    assert "garbage" in (garbage[0].error or "")
    assert [r.ok for r in normalise_reply([1, 2], 2)] == [False, False]


def test_assign_balances_biggest_first_and_names_consumers_by_part():
    units = [WorkUnit("a", "g", 100), WorkUnit("b", "g", 60), WorkUnit("c", "g", 50)]
    parts = assign(units, 2, "rec", "run1")
    assert [(u.stream, p, u.consumer) for u, p in parts] == [
        ("a", 0, "rec-run1-0"), ("b", 1, "rec-run1-1"), ("c", 1, "rec-run1-1")]


def test_throttle_sleeps_to_the_cap():
    now = [0.0]
    slept: list[float] = []

    def sleep(s: float) -> None:
        slept.append(s)
        now[0] += s

    throttle = Throttle(100.0, clock=lambda: now[0], sleep=sleep)
    throttle.take(50)
    throttle.take(50)
    assert now[0] == pytest.approx(1.0)


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


def test_young_collections_rarer_while_a_task_runs_then_as_before():
    before = gc.get_threshold()
    with young_collections_rarer(12_345):
        assert gc.get_threshold() == (12_345, *before[1:])
    assert gc.get_threshold() == before
    with pytest.raises(RuntimeError), young_collections_rarer(777):
        raise RuntimeError("a failed task")
    assert gc.get_threshold() == before  # a reused worker gets its setting back
