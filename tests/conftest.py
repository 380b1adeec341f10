"""Shared fixtures: one SparkSession per run, real Redis/Valkey servers on free ports."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

# Python workers must run this interpreter (the venv), and fault injection reads this file.
os.environ["PYSPARK_PYTHON"] = sys.executable
ROOT = Path(__file__).resolve().parent.parent  # executors import tests.support.handlers
os.environ["PYTHONPATH"] = os.pathsep.join(
    p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
# One fault file per pytest process, set here rather than inherited: xdist workers inherit the
# controller's environment, and a shared file let one worker's injected fault fire in the
# other worker's in-process claim (seen: test_claim failing beside test_end_to_end).
FAULT_FILE = Path(f"/tmp/recovery-faults-{os.getpid()}.txt")
os.environ["RECOVERY_FAULT_FILE"] = str(FAULT_FILE)
# The recording handler's control file too (tests.support.fault_tools, which keeps a value it
# inherits, for the executors' imports of it): pytest's controller loads the conftest.py of
# the folders it is given, so `pytest -n 4 tests/integration/faults` imported fault_tools in
# the controller and every worker steered its handlers through the controller's one file
# (a test's calls recorded in another worker's Redis).
from tests.support.handlers import CONTROL_ENV  # noqa: E402

os.environ[CONTROL_ENV] = f"/tmp/recovery-test-handler-{os.getpid()}.json"
# Every JVM the tests start (spark-submit, local sessions, Airflow's tasks) runs C1 only and
# loads Spark's classes from the archive `make test` dumped, when there is one
# (tests/support/cds.py).
from tests.support.cds import with_archive  # noqa: E402

SUBMIT_OPTS = with_archive(os.environ.get("SPARK_SUBMIT_OPTS"))
if SUBMIT_OPTS:
    os.environ["SPARK_SUBMIT_OPTS"] = SUBMIT_OPTS

from pyspark.sql import SparkSession  # noqa: E402
from redis import Redis  # noqa: E402

from recovery.driver import job as driver_job  # noqa: E402
from recovery.settings.model import Settings, load_settings  # noqa: E402
from recovery.spark.local import local_session  # noqa: E402
from recovery.testing.local_redis import LocalServer  # noqa: E402
from tests.support.cluster_fixtures import LocalCluster  # noqa: E402
from tests.support.connect_run import ConnectServer  # noqa: E402
from tests.support.servers import FLAVORS, REDIS_VERSIONS, start_server  # noqa: E402
from tests.support.tier import enter, slow_only  # noqa: E402
from tests.support.tls_fixtures import TlsFiles, make_tls_files, tls_server  # noqa: E402
from tests.support.wheels import build_wheel_zip, made_once, wheel_installed_python  # noqa: E402


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Tell the quick tier's rule (tests/support/tier.py) whether this test is marked slow."""
    enter(item.get_closest_marker("slow") is not None)


# The job classes import ``run`` when they call it, so every in-process whole run meets this.
driver_job.run = slow_only(driver_job.run, "a whole run of the job (recovery.driver.job.run)")


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's, which reads the groups
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Under ``pytest -n N --dist loadgroup`` (``make test``) all tests that use the cluster
    run in one worker, so only one worker starts one (about 10 s). Run after pytest-xdist's
    own hook, the group was never seen: every worker started a cluster of its own."""
    for item in items:
        if "redis_cluster" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.xdist_group("cluster"))


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    """local[2,3]: two cores, and a failed task is retried (up to 3 failures)."""
    session = local_session("local[2,3]", "recovery-tests", **{
        "spark.sql.shuffle.partitions": "2", "spark.python.worker.reuse": "true"})
    yield session
    session.stop()


def run_wide_temp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The temp directory all of this ``pytest`` run's processes share: under xdist each
    worker's base temp is a folder of it (the xdist documentation's recipe)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


@pytest.fixture(scope="session")
def wheel_zip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The project's wheel under a .zip name (tests/support/wheels.py), built once per run
    for all workers (packaging, notebook and first-hour tests): read it, never change it."""
    return Path(made_once(run_wide_temp(tmp_path_factory), "wheel", lambda where: str(
        build_wheel_zip(where / "wheelhouse", where / "source"))))


@pytest.fixture(scope="session")
def wheel_python(tmp_path_factory: pytest.TempPathFactory, wheel_zip: Path) -> str:
    """A Python with the dependencies and the installed wheel, not the checkout, made once
    per run for all workers: its interpreter path. Run it; never install into it."""
    return made_once(run_wide_temp(tmp_path_factory), "wheel-venv",
                     lambda where: wheel_installed_python(wheel_zip, where))


@pytest.fixture(params=FLAVORS)
def server(request: pytest.FixtureRequest) -> Iterator[LocalServer]:
    """A fresh server per test, of each flavor: Redis 7.0 from the OS, Valkey 8.1 and Redis
    6.2 from their wheels (and, for tests marked ON_NEWEST_TOO, Redis 8.0, Valkey 9.1 and
    Redis 8.6 from Debian's packages: tests/support/servers.py)."""
    srv = start_server(request.param)
    yield srv
    srv.stop()


@pytest.fixture(params=REDIS_VERSIONS)
def redis_version_server(request: pytest.FixtureRequest) -> Iterator[LocalServer]:
    """A fresh Redis 7.0 and a fresh Redis 6.2 (not Valkey): see REDIS_VERSIONS."""
    srv = start_server(request.param)
    yield srv
    srv.stop()


@pytest.fixture
def redis_server() -> Iterator[LocalServer]:
    """A fresh Redis (only), for tests that need one server kind."""
    srv = start_server("redis")
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> TlsFiles:
    """Throwaway CAs, certificates and keys (``tls_fixtures``), made once per test module."""
    return make_tls_files(tmp_path_factory.mktemp("tls"))


@pytest.fixture(scope="module")
def tls_redis(tls_files: TlsFiles) -> Iterator[LocalServer]:
    """A TLS-only Redis with `tls_files`' server certificate, one per test module."""
    srv = tls_server(tls_files)
    yield srv
    srv.stop()


@pytest.fixture(scope="session")
def redis_cluster() -> Iterator[LocalCluster]:
    """A real Redis Cluster (3 primaries, a replica of the first), shared by the session:
    about 10 s to start. Tests flush it (``LocalCluster.flush``) and restore what they change."""
    started = LocalCluster().start()
    yield started
    started.stop()


@pytest.fixture(scope="session")
def connect_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConnectServer]:
    """One local Spark Connect server in a process of its own, shared by the Spark Connect
    tests (``xdist_group("connect")`` keeps them on one worker); each runs the job as its client,
    in a process of its own (``tests/support/connect_run.py``)."""
    started = ConnectServer(tmp_path_factory.mktemp("connect") / "server.log").start()
    yield started
    started.stop()


@pytest.fixture
def client(server: LocalServer) -> Redis:
    return server.client()


@pytest.fixture
def make_settings(server: LocalServer, tmp_path: Path) -> Callable[..., Settings]:
    """Settings against `server` with a temp report dir and the example handler (named: there
    is no default); extra ``section.field=value``."""

    def _make(*overrides: str) -> Settings:
        base = [f"redis.url={server.url}", f"report.path={tmp_path / 'reports'}",
                "claim.min_idle_ms=600000",  # stuck entries are an hour old
                "handler.path=recovery.handlers:example_handler"]
        return load_settings(None, [*base, *overrides])

    return _make


@pytest.fixture
def small_batches(spark: SparkSession) -> Iterator[None]:
    """Apply works in Arrow batches of 20 rows, so a run has many steps to fail between."""
    from tests.support.fault_checks import SMALL_BATCHES

    key, value = SMALL_BATCHES.split("=")
    spark.conf.set(key, value)
    yield
    spark.conf.unset(key)


@pytest.fixture
def faults() -> Iterator[Callable[[str], None]]:
    """Ask executors to fail: ``faults("claim 2 0")`` fails claim step 2 of attempt 0. A test
    in which an asked fault never fired fails at teardown: it did not test its fault."""
    from recovery.executor.faults import FIRED_SUFFIX
    from tests.support.fault_tools import assert_fired

    asked: list[str] = []
    fired = Path(str(FAULT_FILE) + FIRED_SUFFIX)
    fired.unlink(missing_ok=True)

    def _inject(line: str) -> None:
        asked.append(line)
        with FAULT_FILE.open("a") as fh:
            fh.write(line + "\n")

    yield _inject
    FAULT_FILE.unlink(missing_ok=True)
    try:
        assert_fired(*asked)
    finally:
        fired.unlink(missing_ok=True)
