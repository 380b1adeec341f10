"""Import the installed, byte-compiled PySpark instead of spark-submit's zip copy of it.

spark-submit puts ``$SPARK_HOME/python/lib/pyspark.zip`` and the py4j zip first on the
Python path of the driver and of every Python worker. Python cannot cache bytecode for
modules imported from a zip, so each process compiles PySpark's sources again, at every start
(the cost: docs/PERFORMANCE.md).

With a pip-installed PySpark (``SPARK_HOME`` is the ``pyspark`` package itself) the zip holds
the very same files as the package next to it, so moving the zips behind the other path
entries changes where they are read from, never which version is used. Zips of any other
Spark installation (a cluster's own ``SPARK_HOME``) are left where they are.

Must run before anything imports ``pyspark``: the driver's entry points call
``prefer_installed_pyspark()`` first, and the executors' Python daemon is this module
(``spark.python.daemon.module``, see :func:`with_installed_pyspark`).

As the daemon, it also imports the tasks' Redis layer, PySpark's worker module and the Arrow
stack once (:func:`preload`) before PySpark forks the workers from it, so no worker imports
them again (redis-py alone is ~0.2 s of CPU per worker, numpy, pyarrow and pandas ~0.35 s,
paid while the pass starts), and it drops the zips from the path
(:func:`drop_shadowing_zips`): a worker adds its task's file directory
to its path and then invalidates the import caches, which makes the importer of each zip
still on the path read that zip's whole directory again (~0.28 s of CPU per worker for
``pyspark.zip``, measured with py-spy). For the same reason it drops archives that hold no
Python at all (:func:`drop_archives_without_modules`: Spark's core jar, which Spark puts
on the workers' path, was read again at every task).
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.machinery
import os
import pkgutil
import sys
import zipfile
from collections.abc import MutableMapping
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # not at run time: this module runs before pyspark may be imported
    from pyspark.sql import SparkSession

DAEMON_MODULE = "recovery.spark.pyspark_path"
# What the daemon imports before it forks the workers: every module of PRELOADED_PACKAGE,
# PRELOADED and ARROW_STACK. All are modules the tasks import anyway (a worker imports the
# Arrow stack at its first batch: pandas too, which pyarrow imports to convert a list). A fork
# keeps only the forking thread, so the daemon must fork with no other thread that holds a
# lock a worker needs; none of these leaves one that could: Arrow's allocator is set to start
# no background thread (ARROW_ALLOCATOR_CONF, read once, when pyarrow loads; dirty pages are
# then returned by the allocating thread; where an operator's value keeps the thread,
# jemalloc stops it in the child at every fork), and numpy's OpenBLAS, whose pool starts at
# import unless OMP_NUM_THREADS is 1 (Spark sets 1 unless told otherwise), stops that pool
# before every fork (its own pthread_atfork handler; the worker starts it again at its first
# product). PySpark's daemon imports even its worker module after the fork, not knowing
# which module it is: ours is PySpark's own.
# tests/unit/spark/test_pyspark_path.py checks what the daemon holds and that its workers run.
PRELOADED_PACKAGE = "recovery.redis_io"
PRELOADED = ("recovery.errors", "recovery.params", "recovery.handlers", "pyspark.worker")
ARROW_STACK = ("numpy", "pyarrow", "pandas")
ARROW_ALLOCATOR_CONF = "JE_ARROW_MALLOC_CONF"  # the options of pyarrow's own jemalloc


def shadowing_zips(path: list[str]) -> list[str]:
    """The entries of `path` that are zips inside an installed ``pyspark`` package
    (``<site>/pyspark/python/lib/*.zip``, next to ``<site>/pyspark/__init__.py``) while
    ``<site>`` is itself on `path` (compared as real paths: spark-submit finds the package
    through symlinks resolved, the path may name it through a link)."""
    entries = {os.path.realpath(entry) for entry in path}
    found = []
    for entry in path:
        zip_path = Path(entry)
        if zip_path.suffix != ".zip" or len(zip_path.parents) < 4:
            continue
        package = zip_path.parents[2]
        if (package.name == "pyspark" and zip_path.parent.name == "lib"
                and zip_path.parents[1].name == "python" and (package / "__init__.py").is_file()
                and os.path.realpath(package.parent) in entries):
            found.append(entry)
    return found


def prefer_installed_pyspark(path: list[str] | None = None) -> None:
    """Move the zips of :func:`shadowing_zips` to the end of `path` (default ``sys.path``):
    still importable there, but the installed package is found first."""
    path = sys.path if path is None else path
    for entry in shadowing_zips(path):
        path.remove(entry)
        path.append(entry)


def drop_shadowing_zips(path: list[str] | None = None) -> list[str]:
    """Remove from `path` (default ``sys.path``) the zips of :func:`shadowing_zips` whose
    package (named by the zip's stem up to its first ``-``: ``pyspark``, ``py4j``) the rest
    of `path` provides, and forget their cached importers; returns the zips removed. A zip
    whose package is found nowhere else stays (behind it, as :func:`prefer_installed_pyspark`
    leaves it)."""
    path = sys.path if path is None else path
    dropped = []
    for entry in shadowing_zips(path):
        rest = [p for p in path if p != entry]
        package = Path(entry).stem.split("-")[0]
        if importlib.machinery.PathFinder.find_spec(package, rest) is not None:
            _forget(path, entry)
            dropped.append(entry)
    return dropped


def with_installed_pyspark(builder: SparkSession.Builder) -> SparkSession.Builder:
    """`builder`, set to start the Python workers through :func:`main` when ``recovery`` is
    installed (the executors then import it like any task does). Unchanged when it came as a
    ``--py-files`` zip: the daemon starts before a task puts that zip on its path."""
    if any(p.suffix == ".zip" for p in Path(__file__).parents):
        return builder
    return builder.config("spark.python.daemon.module", DAEMON_MODULE)


def drop_archives_without_modules(path: list[str] | None = None) -> list[str]:
    """Remove from `path` (default ``sys.path``) each zip archive (a ``.jar`` or ``.zip``
    file) that holds no Python source or bytecode file, and forget its cached importers;
    returns the archives removed. Nothing can be imported from such an archive, but its
    importer would read its whole directory again at every cache invalidation. Spark puts
    its core jar on the workers' path (~6,000 entries, no Python in PySpark 4)."""
    path = sys.path if path is None else path
    dropped = [entry for entry in path
               if entry.endswith((".jar", ".zip")) and not _holds_modules(entry)]
    for entry in dropped:
        _forget(path, entry)
    return dropped


def _forget(path: list[str], entry: str) -> None:
    """Remove `entry` from `path` and its cached importers (its own and those of directories
    inside it, e.g. ``<jar>/org``) from ``sys.path_importer_cache``."""
    path.remove(entry)
    for key in [k for k in sys.path_importer_cache
                if k == entry or k.startswith(entry + os.sep)]:
        del sys.path_importer_cache[key]


def _holds_modules(archive: str) -> bool:
    """Whether `archive` holds a ``.py`` or ``.pyc`` file; True when it cannot be read as a
    zip (left for the import system to judge)."""
    try:
        with zipfile.ZipFile(archive) as opened:
            return any(name.endswith((".py", ".pyc")) for name in opened.namelist())
    except (OSError, zipfile.BadZipFile):
        return True


def preloaded() -> list[str]:
    """The modules :func:`preload` imports: those of ``PRELOADED``, every module of the
    ``PRELOADED_PACKAGE`` package, and ``ARROW_STACK``."""
    package = importlib.import_module(PRELOADED_PACKAGE)
    return [*PRELOADED, *(f"{PRELOADED_PACKAGE}.{m.name}"
                          for m in pkgutil.iter_modules(package.__path__)), *ARROW_STACK]


def no_allocator_thread(environ: MutableMapping[str, str] | None = None) -> None:
    """Ask pyarrow's jemalloc for no background thread in `environ` (default
    ``os.environ``), which it reads when pyarrow loads: ``background_thread:false`` added to
    ``ARROW_ALLOCATOR_CONF``'s comma-separated ``name:value`` options, unless one of them is
    named ``background_thread`` already (an operator's choice is kept). jemalloc stops
    reading at a malformed option: after one, the thread may still start (jemalloc stops it
    in every forked worker; tests/integration/attacks/test_attack_daemon_preload.py)."""
    environ = os.environ if environ is None else environ
    options = environ.get(ARROW_ALLOCATOR_CONF, "")
    if "background_thread" not in (o.split(":", 1)[0].strip() for o in options.split(",")):
        environ[ARROW_ALLOCATOR_CONF] = ",".join(
            option for option in (options, "background_thread:false") if option)


def preload() -> None:
    """Import :func:`preloaded`'s modules, Arrow's allocator told first to start no thread
    (:func:`no_allocator_thread`). One that fails to import, whatever it raises (a pandas
    built against another numpy raises ValueError), is skipped: the daemon still starts,
    and the task that needs the module reports the error with its own traceback."""
    no_allocator_thread()
    for name in preloaded():
        with contextlib.suppress(Exception):
            importlib.import_module(name)


def main() -> None:
    """The executors' Python daemon: PySpark's own, started after the path is fixed (the
    zips dropped, or put behind the package) and the tasks' Redis layer, PySpark's worker
    module and the Arrow stack are imported."""
    prefer_installed_pyspark()
    drop_shadowing_zips()
    drop_archives_without_modules()
    preload()
    from pyspark import daemon

    daemon.manager()


if __name__ == "__main__":
    main()
