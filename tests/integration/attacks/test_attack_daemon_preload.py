"""Attacks on the executors' Python daemon importing numpy, pyarrow and pandas before it
forks the workers (``recovery/spark/pyspark_path.py``: ``preload``, commit 7dea92f), through
spark-submit of jobs/recover.py, checked in Redis (XPENDING, the handler's own records of
every hand-over and of what each worker and its daemon held: ``tests.support.
preload_handlers:probing``, which uses numpy's BLAS, pyarrow's compute and pandas in every
call):

- operators' thread and allocator choices in the executors' environment
  (``spark.executorEnv.*``): ``OMP_NUM_THREADS=4`` (Spark sets 1 otherwise, so OpenBLAS runs
  a pool in the daemon only then), ``OPENBLAS_NUM_THREADS=8``, and a ``JE_ARROW_MALLOC_CONF``
  that leaves pyarrow's jemalloc starting its background thread in the daemon after all:
  ``background_thread:true`` (an operator's choice, kept) or a malformed value (jemalloc
  stops reading the string at the error, the appended ``background_thread:false`` with it); on
  ``local[8]``, and on ``local[2,3]`` with a worker SIGKILLed mid-call and its task retried
  in a worker the daemon forks again;
- pandas broken in the executors' environment (its import raises ValueError, as a pandas
  built against another numpy does: "numpy.dtype size changed") or missing (ImportError).

Not tried here: the ``--py-files`` zip route (``with_installed_pyspark`` leaves PySpark's
own daemon there: nothing of this change runs).

A test whose docstring says FINDING failed on the code it was written against; one that
says HOLDS passed and is kept as a check that its fault landed and changed nothing it must
not.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from redis import Redis

from recovery.testing.local_redis import LocalServer
from tests.support.backlogs import DEAD
from tests.support.fault_tools import (
    GROUP,
    JobResult,
    finished,
    job_args,
    job_consumers,
    pending_per_consumer,
    seed_kinds,
    spark_submit,
)
from tests.support.preload_handlers import HANDLED, KILL_ENV, URL_ENV, WORKERS

STREAMS = ["s1", "s2"]
PER_STREAM = 60
OVERRIDES = ("handler.path=tests.support.preload_handlers:probing", "spark.partitions=4",
             "spark.split_min_pending=10", "claim.count=5")
JEMALLOC_THREAD = "jemalloc_bg_thd"  # the comm name of jemalloc's background thread


def _run(server: LocalServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
         master: str, *confs: str, handler: str | None = None) -> tuple[Redis, JobResult]:
    """Seed PER_STREAM stuck entries per stream, run the job under spark-submit with
    `confs`, return the client and the result."""
    client = Redis.from_url(server.url)
    seed_kinds(client, STREAMS, {"ok": (PER_STREAM, 1)})
    monkeypatch.setenv(URL_ENV, server.url)
    overrides = [*OVERRIDES, *([f"handler.path={handler}"] if handler else [])]
    args = job_args(server.url, tmp_path / "reports", STREAMS, *overrides)
    logs = tmp_path / "logs"
    return client, finished(spark_submit(args, logs, *confs, master=master), logs, 240)


def _workers(client: Redis) -> dict[int, dict]:
    return {int(pid): json.loads(held) for pid, held in client.hgetall(WORKERS).items()}


def _handled_once_and_nothing_pending(client: Redis, result: JobResult) -> None:
    """Every seeded entry handed over exactly once, acked, nothing left in any PEL."""
    handled = {k.decode(): int(n) for k, n in client.hgetall(HANDLED).items()}
    assert len(handled) == len(STREAMS) * PER_STREAM, result.stderr[-3000:]
    assert set(handled.values()) == {1}, {k: n for k, n in handled.items() if n != 1}
    assert pending_per_consumer(client, STREAMS) == {}
    assert result.code == 0 and result.summary["status"] == "ok", result.stderr[-3000:]
    assert result.summary["totals"]["reprocessed"] == len(STREAMS) * PER_STREAM


@pytest.mark.slow
@pytest.mark.parametrize("server", ["redis"], indirect=True)
def test_blas_pools_and_a_malformed_allocator_conf_on_eight_tasks(
        server: LocalServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """HOLDS. An operator's ``OMP_NUM_THREADS=4``, ``OPENBLAS_NUM_THREADS=8`` and a
    malformed ``JE_ARROW_MALLOC_CONF`` (``garbage``) reach the daemon and its workers, on
    ``local[8]``: jemalloc reads nothing of the string (``garbage,background_thread:false``),
    so the daemon forks every worker with jemalloc's background thread running (contrary to
    docs/OPERATIONS.md's "pyarrow's allocator then starts no thread"; the fork handler of
    jemalloc turns it off in the child). Every worker starts with one thread, runs BLAS,
    Arrow compute and pandas, and every entry is handed over once and acked."""
    client, result = _run(server, tmp_path, monkeypatch, "local[8]",
                          "spark.executorEnv.OMP_NUM_THREADS=4",
                          "spark.executorEnv.OPENBLAS_NUM_THREADS=8",
                          "spark.executorEnv.JE_ARROW_MALLOC_CONF=garbage")
    workers = _workers(client)
    assert len(workers) >= 2, workers  # the tasks ran in more than one forked worker
    for held in workers.values():
        assert held["preloaded"] == ["numpy", "pyarrow", "pandas"]  # the daemon's, inherited
        assert held["env"] == {"JE_ARROW_MALLOC_CONF": "garbage,background_thread:false",
                               "OMP_NUM_THREADS": "4", "OPENBLAS_NUM_THREADS": "8"}
        assert JEMALLOC_THREAD in held["daemon"]  # the fault: a thread in the forking daemon
        assert held["threads"] == 1  # the fork kept only the forking thread
    if len(os.sched_getaffinity(0)) > 1:  # OpenBLAS started its pool again in the worker
        assert max(held["blas_threads"] for held in workers.values()) > 1
    _handled_once_and_nothing_pending(client, result)


@pytest.mark.slow
@pytest.mark.parametrize("server", ["redis"], indirect=True)
def test_a_worker_killed_mid_call_is_forked_again_from_a_daemon_with_threads(
        server: LocalServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """HOLDS. ``JE_ARROW_MALLOC_CONF=background_thread:true`` (an operator's choice, kept:
    the daemon holds jemalloc's thread; the attacker first reached that with
    ``max_background_threads:1``, which the job took for a ``background_thread`` option until
    it compared option names) and ``OMP_NUM_THREADS=4``, on ``local[2,3]``; the first worker to
    call the handler SIGKILLs itself after its claim, before it answers. The task is retried
    in a worker forked from the same daemon; every entry is handed over exactly once (the
    killed call recorded none), acked, and no PEL keeps anything."""
    kill_file = tmp_path / "killed"
    monkeypatch.setenv(KILL_ENV, str(kill_file))
    client, result = _run(server, tmp_path, monkeypatch, "local[2,3]",
                          "spark.executorEnv.OMP_NUM_THREADS=4",
                          "spark.executorEnv.JE_ARROW_MALLOC_CONF=background_thread:true")
    assert kill_file.exists(), "no worker killed itself"
    assert "Python worker exited unexpectedly" in result.stderr  # the kill landed mid-task
    workers = _workers(client)
    assert len(workers) >= 2 and len({held["ppid"] for held in workers.values()}) == 1, workers
    for held in workers.values():
        assert JEMALLOC_THREAD in held["daemon"] and held["threads"] == 1
        assert held["env"]["JE_ARROW_MALLOC_CONF"] == "background_thread:true"
    _handled_once_and_nothing_pending(client, result)


def _pandas_that_fails(where: Path, error: str) -> Path:
    """A ``pandas`` package whose import notes its process in ``where/imported`` and then
    raises `error` (a Python expression), in `where`."""
    package = where / "pandas"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(
        "import os\n"
        f"with open({str(where / 'imported')!r}, 'a') as fh: fh.write(f'{{os.getpid()}}\\n')\n"
        f"raise {error}\n")
    return where


def _run_with_pandas_that_fails(server: LocalServer, tmp_path: Path,
                                monkeypatch: pytest.MonkeyPatch, error: str
                                ) -> tuple[Redis, JobResult, list[str]]:
    broken = _pandas_that_fails(tmp_path / "site", error)
    client, result = _run(server, tmp_path, monkeypatch, "local[2]",
                          f"spark.executorEnv.PYTHONPATH={broken}",
                          handler="tests.support.handlers:verify_or_fail")
    imported = (broken / "imported").read_text().split() if (broken / "imported").exists() \
        else []
    return client, result, imported


@pytest.mark.slow
@pytest.mark.parametrize("server", ["redis"], indirect=True)
def test_pandas_broken_on_the_executors_is_reported_as_its_own_error(
        server: LocalServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """FINDING (fixed: ``preload`` skips any exception). pandas on the executors' path
    raises ValueError at import, as a pandas built
    against another numpy does (``spark.executorEnv.PYTHONPATH``; the handler,
    ``verify_or_fail``, does not use it). pyarrow in the tasks imports pandas too, so the run
    fails, with nothing claimed; but without the daemon module
    (``--conf spark.python.use.daemon=false``) its one error line names the cause ("error:
    the Spark job failed: ValueError: numpy.dtype size changed, ..."), and ``preload``'s
    docstring promises as much ("One that fails to import is skipped: the task that needs
    it reports the error with its own traceback"). ``preload`` skips only ImportError: the
    ValueError kills the daemon before it writes its port, and the run says "error: the
    Spark job failed: org.apache.spark.SparkException: EOFException occurred while reading
    the port number from recovery.spark.pyspark_path's stdout." (pandas' error is only in
    Spark's log). Redis is untouched (every entry still the dead consumer's)."""
    client, result, imported = _run_with_pandas_that_fails(
        server, tmp_path, monkeypatch,
        'ValueError("numpy.dtype size changed, may indicate binary incompatibility")')
    assert imported, "the broken pandas was never imported"
    assert "numpy.dtype size changed" in result.stderr, result.stderr[-3000:]
    assert result.code != 0 and result.summary["status"] == "error"
    assert pending_per_consumer(client, STREAMS) == {DEAD: len(STREAMS) * PER_STREAM}
    assert all(job_consumers(client, s, GROUP) == [] for s in STREAMS)
    assert "numpy.dtype size changed" in (result.summary["error"] or ""), \
        result.summary["error"]


@pytest.mark.slow
@pytest.mark.parametrize("server", ["redis"], indirect=True)
def test_pandas_missing_on_the_executors_leaves_the_daemon_and_the_run_working(
        server: LocalServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """HOLDS. pandas on the executors' path raises ImportError at import (missing): the
    daemon tries it (its pid noted by the package) and skips it, the workers do without it
    (pyarrow needs pandas only to convert to it), and every entry is handed over once and
    acked, nothing left pending."""
    client, result, imported = _run_with_pandas_that_fails(
        server, tmp_path, monkeypatch, 'ImportError("No module named pandas (test)")')
    assert imported, "the missing pandas was never tried"
    assert result.code == 0 and result.summary["status"] == "ok", result.stderr[-3000:]
    assert result.summary["totals"]["reprocessed"] == len(STREAMS) * PER_STREAM
    assert pending_per_consumer(client, STREAMS) == {}
    assert all(client.xlen(s) == PER_STREAM for s in STREAMS)
