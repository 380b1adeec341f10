"""The fix named for a failed TLS connection (recovery.redis_io.tls_errors.tls_hint): one
hint per OpenSSL reason, naming the setting to change; a plain-text URL gets only the hints
that can apply to it, and an unrelated failure none. Pure: the texts as redis-py reports
them (the same failures from a real TLS server: tests/unit/redis_io/test_tls.py)."""

from __future__ import annotations

import pytest

from recovery.redis_io.tls_errors import tls_hint

VERIFY = "[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: "


@pytest.mark.parametrize(("text", "url", "setting"), [
    (VERIFY + "IP address mismatch, certificate is not valid for '127.0.0.1'",
     "rediss://127.0.0.1:6380", "redis.tls_check_hostname"),
    (VERIFY + "Hostname mismatch", "rediss://cache:6380", "redis.tls_check_hostname"),
    (VERIFY + "unable to get local issuer certificate", "rediss://cache:6380",
     "redis.tls_ca_file"),
    ("[SSL: WRONG_VERSION_NUMBER] wrong version number", "rediss://cache:6379", "tls-port"),
    ("Timeout connecting to server", "rediss://cache:6379", "redis.socket_timeout_s"),
    ("[SSL: TLSV13_ALERT_CERTIFICATE_REQUIRED] tlsv13 alert certificate required",
     "rediss://cache:6380", "redis.tls_cert_file"),
    ("Error 104 while writing to socket. Connection reset by peer.", "redis://cache:6380",
     "rediss://"),
])
def test_each_tls_failure_names_its_setting(text: str, url: str, setting: str) -> None:
    """Catches a failure given the wrong fix (a name mismatch sent to the CA setting) or
    none."""
    hint = tls_hint(text, url)
    assert hint is not None and setting in hint


@pytest.mark.parametrize(("text", "url"), [
    ("[SSL: WRONG_VERSION_NUMBER] wrong version number", "redis://cache:6379"),
    ("Timeout connecting to server", "redis://cache:6379"),
    ("Connection reset by peer", "rediss://cache:6380"),
    ("Connection refused", "rediss://cache:6380"),
    ("NOAUTH Authentication required.", "redis://cache:6379"),
])
def test_no_tls_hint_where_tls_is_not_the_cause(text: str, url: str) -> None:
    """Catches a plain redis:// timeout or refusal blamed on TLS settings."""
    assert tls_hint(text, url) is None
