"""Settings (recovery.settings.model, recovery.settings.redis, the claim section of
recovery.settings.claim, the sections' base in recovery.settings.base): sources in their
order, the password moved out of the URL into a secret, and a bad value or an unknown key
refused in one line that names the field."""

from __future__ import annotations

from pathlib import Path

import pytest

from recovery.errors import ConfigError
from recovery.settings.model import executor_params, load_settings
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
