"""Spark's Python processes import the installed PySpark, not spark-submit's zip copy."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
import zipimport
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyspark
import pytest
from pyspark.sql import SparkSession

from recovery.spark import pyspark_path
from recovery.spark.pyspark_path import (
    drop_archives_without_modules,
    drop_shadowing_zips,
    prefer_installed_pyspark,
    with_installed_pyspark,
)


def _installed_pyspark(site: Path) -> list[str]:
    """A pip-style PySpark under `site` with spark-submit's two zips; returns the zips."""
    lib = site / "pyspark" / "python" / "lib"
    lib.mkdir(parents=True)
    (site / "pyspark" / "__init__.py").write_text("")
    zips = [lib / "pyspark.zip", lib / "py4j-0.10.9.9-src.zip"]
    for z in zips:
        z.write_bytes(b"")
    return [str(z) for z in zips]


def test_the_zips_of_the_installed_pyspark_go_behind_it(tmp_path: Path):
    site = tmp_path / "site-packages"
    zips = _installed_pyspark(site)
    other = str(tmp_path / "opt" / "spark" / "python" / "lib" / "pyspark.zip")
    not_spark_submits = [str(site / "pyspark" / "data" / "lib" / "extra.zip"),
                         str(site / "pyspark" / "python" / "data" / "extra.zip")]
    path = [*zips, other, *not_spark_submits, "/app", str(site)]
    prefer_installed_pyspark(path)
    assert path == [other, *not_spark_submits, "/app", str(site), *zips]


def test_the_package_may_be_on_the_path_through_a_link(tmp_path: Path):
    """spark-submit names the zips by their real path; a venv may be reached through a link."""
    site = tmp_path / "real" / "site-packages"
    zips = _installed_pyspark(site)
    (tmp_path / "link").symlink_to(tmp_path / "real")
    linked_site = str(tmp_path / "link" / "site-packages")
    path = [*zips, linked_site]
    prefer_installed_pyspark(path)
    assert path == [linked_site, *zips]


def test_zips_stay_first_when_their_package_is_not_on_the_path(tmp_path: Path):
    zips = _installed_pyspark(tmp_path / "site-packages")
    path = [*zips, "/app"]
    prefer_installed_pyspark(path)
    assert path == [*zips, "/app"]


def test_the_daemon_drops_the_zips_whose_package_the_path_provides(tmp_path: Path,
                                                                    monkeypatch):
    """pyspark is in site-packages: its zip goes, with its cached importer; py4j is not: its
    zip stays."""
    site = tmp_path / "site-packages"
    pyspark_zip, py4j_zip = _installed_pyspark(site)
    monkeypatch.setitem(sys.path_importer_cache, pyspark_zip, None)
    path = [pyspark_zip, py4j_zip, "/app", str(site)]
    assert drop_shadowing_zips(path) == [pyspark_zip]
    assert path == [py4j_zip, "/app", str(site)]
    assert pyspark_zip not in sys.path_importer_cache


def _archive(path: Path, names: list[str]) -> str:
    """A zip archive at `path` holding empty files of `names`."""
    with zipfile.ZipFile(path, "w") as archive:
        for name in names:
            archive.writestr(name, "")
    return str(path)


def test_the_daemon_drops_archives_from_which_nothing_can_be_imported(tmp_path: Path,
                                                                       monkeypatch):
    """A jar of classes goes, with its cached importers (also the one of a directory in it);
    an archive with a module stays, with its importer; so does a file that only looks like
    an archive (the import system judges it as before)."""
    classes = _archive(tmp_path / "core.jar", ["org/apache/A.class", "META-INF/MANIFEST.MF"])
    modules = _archive(tmp_path / "lib.zip", ["pkg/__init__.py", "pkg/tool.pyc"])
    (tmp_path / "odd.jar").write_bytes(b"not a zip")
    odd = str(tmp_path / "odd.jar")
    for key in (classes, os.path.join(classes, "org"), modules):
        monkeypatch.setitem(sys.path_importer_cache, key, zipimport.zipimporter(key))
    path = [classes, "/app", modules, odd]
    assert drop_archives_without_modules(path) == [classes]
    assert path == ["/app", modules, odd]
    assert [k for k in sys.path_importer_cache if k.startswith(classes)] == []
    assert modules in sys.path_importer_cache


def _spark_core_jar() -> str:
    """The jar Spark puts on its workers' Python path (the one of its core classes)."""
    jars = list((Path(pyspark.__file__).parent / "jars").glob("spark-core_*.jar"))
    assert len(jars) == 1, jars
    return str(jars[0])


def _spark_submits_zips() -> list[str]:
    """The zips spark-submit puts on the Python path: those of the installed PySpark."""
    lib = Path(pyspark.__file__).parent / "python" / "lib"
    zips = sorted(str(z) for z in lib.glob("*.zip"))
    assert len(zips) == 2, zips
    return zips


def _where_pyspark_comes_from(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    import pyspark

    for _ in batches:
        yield pa.RecordBatch.from_pylist([{"file": pyspark.__file__, "path": sys.path}])


@pytest.mark.slow
def test_python_workers_import_the_installed_pyspark(spark):
    """The session (like the job's) starts its workers through recovery.spark.pyspark_path:
    they import PySpark from site-packages, and spark-submit's zips of it (and of py4j,
    installed beside it) and Spark's core jar (no Python in it) are no longer on their
    path."""
    gone = [*_spark_submits_zips(), _spark_core_jar()]
    rows = spark.range(2, numPartitions=2).mapInArrow(
        _where_pyspark_comes_from, "file string, path array<string>").collect()
    for row in rows:
        assert ".zip" not in row["file"], row["file"]
        assert [p for p in row["path"] if p in gone] == []


def test_the_daemon_is_ours_when_recovery_is_installed():
    """(From a --py-files zip it is PySpark's own: tests/integration/test_packaging.py runs
    that.) The daemon named is this very module, wherever it moves."""
    builder = with_installed_pyspark(SparkSession.builder)
    assert builder._options["spark.python.daemon.module"] == pyspark_path.__name__


def test_arrows_allocator_is_asked_for_no_thread_unless_an_operator_chose():
    for before, after in [(None, "background_thread:false"),
                          ("dirty_decay_ms:500", "dirty_decay_ms:500,background_thread:false"),
                          ("background_thread:true", "background_thread:true"),
                          ("narenas:2, background_thread:true",
                           "narenas:2, background_thread:true"),
                          ("max_background_threads:1",
                           "max_background_threads:1,background_thread:false")]:
        environ = {} if before is None else {pyspark_path.ARROW_ALLOCATOR_CONF: before}
        pyspark_path.no_allocator_thread(environ)
        assert environ == {pyspark_path.ARROW_ALLOCATOR_CONF: after}


# Run in a fresh interpreter: PySpark's daemon loop replaced (before anything imports pyspark)
# by one fork, as the daemon forks a worker: the worker reports what it holds and whether the
# Arrow stack works in it (a matrix product starts OpenBLAS's pool again).
_DAEMON_FORKS = """
import json, os, sys, types
def fork_a_worker():
    daemon_threads = len(os.listdir(f"/proc/{os.getpid()}/task"))
    pid = os.fork()
    if pid:
        os.waitpid(pid, 0)
        return
    threads = len(os.listdir(f"/proc/{os.getpid()}/task"))
    import numpy, pyarrow
    product = float((numpy.ones((300, 300)) @ numpy.ones((300, 300))).sum())
    print(json.dumps({"modules": sorted(sys.modules), "path": sys.path,
                      "pyspark": sys.modules["pyspark"].__file__, "threads": threads,
                      "daemon_threads": daemon_threads,
                      "product": product, "array": pyarrow.array([[1], [2]]).to_pylist(),
                      "allocator": os.environ.get("JE_ARROW_MALLOC_CONF")}), flush=True)
    os._exit(0)
sys.modules["pyspark.daemon"] = types.SimpleNamespace(manager=fork_a_worker)
from recovery.spark import pyspark_path
pyspark_path.main()
"""


@pytest.mark.slow
def test_a_worker_forked_from_the_daemon_holds_the_preloaded_modules_and_one_thread():
    """Workers forked from the daemon find the tasks' Redis layer, PySpark's worker module
    and the Arrow stack imported, and spark-submit's zips (first on the path, as spark-submit
    puts them) and Spark's core jar gone; a worker starts with one thread (a fork keeps only
    the forking thread), also where OpenBLAS ran a pool in the daemon (OMP_NUM_THREADS
    unset), and numpy's products and pyarrow work in it."""
    gone = [*_spark_submits_zips(), _spark_core_jar()]
    env = {key: value for key, value in os.environ.items()
           if key not in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                          pyspark_path.ARROW_ALLOCATOR_CONF)}
    env["PYTHONPATH"] = os.pathsep.join(gone)
    out = subprocess.run([sys.executable, "-c", _DAEMON_FORKS], capture_output=True,
                         text=True, check=True, timeout=60, env=env).stdout
    held = json.loads(out.strip().splitlines()[-1])
    assert [p for p in held["path"] if p in gone] == []
    assert ".zip" not in held["pyspark"]
    expected = pyspark_path.preloaded()
    assert "recovery.redis_io.autoclaim" in expected and "redis" not in expected
    assert {"pyspark.worker", "pyarrow", "pandas", "numpy"} <= set(expected)
    assert [m for m in expected if m not in held["modules"]] == []
    assert "redis.cluster" in held["modules"]
    if len(os.sched_getaffinity(0)) > 1:  # OpenBLAS ran its pool in the daemon
        assert held["daemon_threads"] > 1
    assert held["threads"] == 1
    assert held["product"] == 300.0 ** 3
    assert held["array"] == [[1], [2]]
    assert held["allocator"] == "background_thread:false"
