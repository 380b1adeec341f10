"""Settings (recovery.settings.model, recovery.settings.redis, the claim section of
recovery.settings.claim, the smaller sections of recovery.settings.sections, the sections'
base in recovery.settings.base, the per-mode [reprocess] of recovery.settings.reprocess):
sources in their order, the password moved out of the URL into a secret, a bad value or an
unknown key refused in one line that names the field, and each re-processing mode's keys
as users write them."""

from __future__ import annotations

from pathlib import Path

import pytest

from recovery.errors import ConfigError
from recovery.settings.model import effective_config, executor_params, load_settings
from recovery.settings.redis import redacted_url


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


REPROCESS_KEYS = {"mode", "requeue_stream", "live_within_ms", "delete_acked"}


@pytest.mark.parametrize(("overrides", "env", "fragment"), [
    (["reprocess.live_within_ms=0"], {}, "reprocess.live_within_ms: Input should be greater "
                                         "than 0 (from --set)"),
    (["reprocess.mode=requeue", "reprocess.live_within_ms=0"], {},
     "reprocess.live_within_ms: Input should be greater than 0"),
    (["reprocess.mode=reassign", "reprocess.requeue_stream=bad"], {},
     "reprocess.requeue_stream: 'bad' is not a retry stream name"),
    (["reprocess.mode=requeue_all"], {}, "reprocess.mode: Input should be 'handler', "
                                         "'requeue'"),
    ([], {"RECOVERY_REPROCESS__MODE": "bogus"}, "reprocess.mode: Input should be 'handler', "
                                                "'requeue'"),
    ([], {"RECOVERY_REPROCESS__MODE": "bogus"}, "(from RECOVERY_REPROCESS__MODE)"),
    (["reprocess.requeu_stream=x"], {}, "reprocess.requeu_stream: unknown setting, did you "
                                        "mean reprocess.requeue_stream?"),
    (["reprocess.live_within_ms="], {}, "this one needs a value (default 60000)"),
    (["reprocess.mode=reassign", "order.key_field=k"], {},
     "order.key_field needs reprocess.mode = \"handler\" (it is 'reassign')"),
    (["dead_letter.stream={stream}:retry", "reprocess.requeue_stream={stream}:retry"], {},
     "reprocess.requeue_stream '{stream}:retry' both name"),
])
def test_a_bad_reprocess_key_is_refused_whatever_the_mode(overrides, env, fragment,
                                                         monkeypatch):
    """Each mode's keys are checked in every mode, and named as users write them (no mode
    tag in the name); the dead-letter clash reads requeue_stream in the handler mode too."""
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError) as refused:
        load_settings(None, ["streams.keys=s", *overrides])
    assert fragment in str(refused.value)
    assert ".handler." not in str(refused.value) and ".reassign." not in str(refused.value)


@pytest.mark.parametrize(("overrides", "own"), [
    ([], {}),
    (["reprocess.requeue_stream={stream}:r", "reprocess.live_within_ms=7"], {}),
    (["reprocess.mode=requeue", "reprocess.requeue_stream={stream}:r"],
     {"requeue_stream": "{stream}:r"}),
    (["reprocess.mode=reassign", "reprocess.live_within_ms=7"], {"live_within_ms": 7}),
    (["reprocess.mode=requeue", "reprocess.live_within_ms=7"], {"requeue_stream": None}),
])
def test_every_mode_takes_every_key_and_sends_its_own(overrides, own, monkeypatch):
    """Another mode's key is accepted (a config switches modes with --set alone), shown by
    --print-config as before, and only the mode's own keys travel to the executors."""
    monkeypatch.setenv("RECOVERY_REPROCESS__DELETE_ACKED", "true")
    s = load_settings(None, ["streams.keys=s", *overrides])
    shown = effective_config(s)["reprocess"]
    assert set(shown) >= REPROCESS_KEYS and shown["delete_acked"] is True
    given = dict(o.split("=", 1) for o in overrides)
    assert shown["requeue_stream"] == given.get("reprocess.requeue_stream")
    assert shown["live_within_ms"] == int(given.get("reprocess.live_within_ms", 60_000))
    params = executor_params(s, "r")
    assert (params.reprocess_mode, dict(params.mode_options), params.delete_acked) == (
        shown["mode"], own, True)
