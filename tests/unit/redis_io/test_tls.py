"""TLS against a real TLS-only redis-server (``--port 0 --tls-port``), with a throwaway CA.

The job runs end to end over ``rediss://`` with a client certificate; each misconfiguration
(a CA that did not sign the server, a certificate for another name, no client certificate,
TLS to a plain port) fails before Spark starts with exit code 1 and one line that names the
setting to fix (recovery.redis_io.tls_errors). Hostname checking is on unless
``redis.tls_check_hostname = false``, and that switch never turns off the check of the
certificate chain.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from recovery.driver.job import run
from recovery.errors import RedisUnavailableError
from recovery.jobs.recover import RecoverJob, preflight
from recovery.redis_io.cluster import StreamCluster
from recovery.redis_io.deadline import BoundedSSLConnection
from recovery.redis_io.redis_conn import connect
from recovery.settings.model import load_settings, redis_params
from recovery.testing.local_redis import LocalServer
from tests.support.backlogs import seed
from tests.support.cluster_fixtures import LocalCluster, keys_on_every_primary
from tests.support.invariants import final_states
from tests.support.tls_fixtures import TlsFiles, tls_server


@pytest.fixture(scope="module")
def wrong_name_redis(tls_files: TlsFiles) -> Iterator[LocalServer]:
    srv = tls_server(tls_files, wrong_name=True)
    yield srv
    srv.stop()


def tls_settings(files: TlsFiles, url: str, ca: Path | None = None, client_cert: bool = True,
                 *extra: str) -> list[str]:
    sets = [f"redis.url={url}", f"redis.tls_ca_file={ca or files.ca}", "streams.keys=orders",
            "handler.path=recovery.handlers:example_handler"]  # named: there is no default
    if client_cert:
        sets += [f"redis.tls_cert_file={files.client_cert}",
                 f"redis.tls_key_file={files.client_key}"]
    return [*sets, *extra]


@pytest.mark.slow
def test_the_job_runs_over_tls_with_a_client_certificate(spark, tls_files, tls_redis,
                                                         tmp_path):
    client = tls_redis.client()
    client.flushall()
    seeded = seed(client, ["orders"], ["billing"])
    settings = load_settings(None, [
        *tls_settings(tls_files, tls_redis.url), f"report.path={tmp_path / 'r'}",
        "claim.count=7", "claim.min_idle_ms=600000",
        "handler.path=tests.support.handlers:verify_or_fail"])
    assert settings.redis.url.startswith("rediss://") and settings.redis.tls_check_hostname
    summary = run(spark, settings)
    expected = {k: v for k, v in seeded.state.items() if v != "gone"}
    states = {k: "pending:job" if v.startswith("pending:recovery-") else v
              for k, v in final_states(client, expected).items()}
    assert states == expected
    assert summary.totals["reprocessed"] == 120


@pytest.mark.slow
@pytest.mark.parametrize(("case", "hint"), [
    ("CA that did not sign the server", "point redis.tls_ca_file at the CA that signed it"),
    ("no client certificate", "set redis.tls_cert_file and redis.tls_key_file"),
    ("certificate for another name", "set redis.tls_check_hostname = false to skip only"),
    ("TLS to a plain port", "the port may not speak TLS (use a redis:// URL"),
    ("plain to the TLS port", "a server that speaks TLS only needs a rediss:// URL"),
])
def test_a_tls_misconfiguration_fails_in_one_line(case, hint, spark, tls_files, tls_redis,
                                                  wrong_name_redis, redis_server, capsys):
    url, ca, client_cert, extra = tls_redis.url, None, True, []
    if case == "CA that did not sign the server":
        ca = tls_files.other_ca
    elif case == "no client certificate":
        client_cert = False
    elif case == "certificate for another name":
        url = wrong_name_redis.url
    elif case == "TLS to a plain port":  # the handshake waits for connect_timeout_s (redis-py
        # 8.2; socket_timeout_s before), 4 tries
        url = redis_server.url.replace("redis://", "rediss://")
        extra = ["redis.socket_timeout_s=0.5", "redis.connect_timeout_s=0.5"]
    else:
        url = tls_redis.url.replace("rediss://", "redis://")
    sets = tls_settings(tls_files, url, ca, client_cert, *extra)
    args = [a for s in sets for a in ("--set", s)]
    code = RecoverJob(lambda s: pytest.fail("Spark must not start")).main(args)  # type: ignore[arg-type]
    errors = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert code == 1
    assert len(errors) == 1 and errors[0].startswith("error: cannot reach Redis at 127.0.0.1:")
    assert hint in errors[0], errors[0]


@pytest.mark.slow
def test_hostname_checking_can_be_turned_off_but_the_chain_is_still_checked(
        tls_files, tls_redis, wrong_name_redis):
    off = "redis.tls_check_hostname=false"
    preflight(load_settings(None, tls_settings(tls_files, wrong_name_redis.url, None, True,
                                               off)))  # the name is wrong, but allowed now
    untrusted = r"CERTIFICATE_VERIFY_FAILED.*not signed by a CA"
    with pytest.raises(RedisUnavailableError, match=untrusted):
        preflight(load_settings(None, tls_settings(tls_files, tls_redis.url,
                                                   tls_files.other_ca, True, off)))
    localhost = tls_redis.url.replace("127.0.0.1", "localhost")  # DNS:localhost in the SAN
    preflight(load_settings(None, tls_settings(tls_files, localhost)))


def test_connect_hands_the_tls_settings_to_redis_py(tls_files, tls_redis):
    """Executors connect from RedisParams alone (no settings object): the same TLS options."""
    settings = load_settings(None, tls_settings(tls_files, tls_redis.url))
    client = connect(redis_params(settings))
    kwargs = client.connection_pool.connection_kwargs
    assert (kwargs["ssl_ca_certs"], kwargs["ssl_certfile"], kwargs["ssl_keyfile"]) == (
        str(tls_files.ca), str(tls_files.client_cert), str(tls_files.client_key))
    assert kwargs["ssl_check_hostname"] is True and kwargs["ssl_cert_reqs"] == "required"
    assert client.ping()



@pytest.fixture(scope="module")
def tls_cluster(tls_files: TlsFiles) -> Iterator[LocalCluster]:
    """Three primaries speaking TLS only, to clients and on the cluster bus."""
    cluster = LocalCluster(tls=tls_files, with_replica=False).start()
    yield cluster
    cluster.stop()


@pytest.mark.slow
def test_the_job_runs_on_a_tls_cluster(spark, tls_files, tls_cluster, tmp_path):
    rc = tls_cluster.client()
    streams = ["orders", *keys_on_every_primary(rc, 1)]
    seeded = seed(rc, streams, ["billing"])
    settings = load_settings(None, [
        *tls_settings(tls_files, tls_cluster.url), "streams.match=*",
        f"report.path={tmp_path / 'r'}", "claim.min_idle_ms=600000",
        "handler.path=tests.support.handlers:verify_or_fail"])
    client = connect(redis_params(settings))
    assert isinstance(client, StreamCluster)
    assert {n.port for n in client.get_primaries()} == {n.port for n in tls_cluster.primaries}
    # each node's pool (built from the rediss:// URL) bounds each whole reply, over TLS
    assert {client.get_redis_connection(n).connection_pool.connection_class
            for n in client.get_primaries()} == {BoundedSSLConnection}
    summary = run(spark, settings)
    expected = {k: v for k, v in seeded.state.items() if v != "gone"}
    states = {k: "pending:job" if v.startswith("pending:recovery-") else v
              for k, v in final_states(rc, expected).items()}
    assert states == expected
    assert summary.totals["reprocessed"] == 120 * len(streams)
