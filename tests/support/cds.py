"""A class-data-sharing archive for the JVMs the tests start (``make test``, README "Tests").

Most of a JVM's start is loading Spark's classes. ``python -m tests.support.cds`` (run by
``make test`` and ``make test-fast`` before pytest) dumps the classes one small job run loads
(spark-submit of ``jobs/recover.py`` on a 40-entry backlog: Spark SQL, Arrow, the Python
workers, the report writer) into ``.cds/tests-<key>.jsa``, once: the key names this Java and
this PySpark install, so a changed JDK or Spark makes a new archive and the old one is never
read. tests/conftest.py puts :func:`tests_java_options` (C1 only, and the archive) in
``SPARK_SUBMIT_OPTS``, which reaches the driver JVM of every spark-submit and every local
PySpark session the tests start (their own, Airflow's tasks', the wheel's): no command line
under test changes.

Without the archive (not built, or the dump failed) the option is empty and the JVMs start
as before. With an archive the JVM cannot use (a class path other than the dump's, e.g.
another ``SPARK_CONF_DIR``), it starts without it, silently: the JVM's own ``cds`` log tags,
the only ones that would speak of it, are off.
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.metadata
import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

from recovery.spark.properties import C1_ONLY

ROOT = Path(__file__).resolve().parents[2]
FOLDER = ROOT / ".cds"
QUIET = "-Xshare:auto -Xlog:cds=off -Xlog:cds+dynamic=off"  # a refused archive says nothing


def java_binary() -> Path | None:
    """The java spark-submit's launcher runs: ``$JAVA_HOME/bin/java``, else the one on PATH
    (symbolic links resolved); None when there is none."""
    home = os.environ.get("JAVA_HOME")
    found = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    return Path(found).resolve() if found and Path(found).exists() else None


def archive_key() -> str | None:
    """16 hex digits naming this JDK (its binary's path, size and mtime) and this PySpark
    (version, install path, jar names): what a dynamic archive is tied to. None without a
    java or a pyspark."""
    java = java_binary()
    spec = importlib.util.find_spec("pyspark")
    if java is None or spec is None or spec.origin is None:
        return None
    spark_home = Path(spec.origin).parent
    stat = java.stat()
    jars = sorted(p.name for p in (spark_home / "jars").glob("*.jar"))
    parts = [str(java), str(stat.st_size), str(stat.st_mtime_ns),
             importlib.metadata.version("pyspark"), str(spark_home), *jars]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def archive_path() -> Path | None:
    """Where this JDK's and PySpark's archive is (or would be): ``.cds/tests-<key>.jsa``."""
    key = archive_key()
    return FOLDER / f"tests-{key}.jsa" if key else None


def java_options() -> str:
    """The JVM options that use the archive, quietly; "" when there is no archive."""
    archive = archive_path()
    if archive is None or not archive.is_file():
        return ""
    return f"-XX:SharedArchiveFile={archive} {QUIET}"


def tests_java_options() -> str:
    """The options of every driver JVM the tests start: C1 only (a short run spends more CPU
    compiling with C2 than C2's code saves it, recovery/spark/local.py) and
    :func:`java_options`."""
    return " ".join(p for p in (C1_ONLY, java_options()) if p)


def with_archive(submit_opts: str | None) -> str:
    """``SPARK_SUBMIT_OPTS`` `submit_opts` (the environment's, or None) with
    :func:`tests_java_options` added after it, once (an xdist worker inherits its
    controller's): the caller's own options stay."""
    options, given = tests_java_options(), submit_opts or ""
    return given if options in given else " ".join(p for p in (given, options) if p)


def build() -> Path | None:
    """Dump the archive unless it exists: one job run (tests.benchmark.run, 2 streams x 20
    entries) with ``-XX:ArchiveClassesAtExit`` on its driver, written under a temp name and
    renamed when whole. Concurrent callers wait on ``.cds/tests.lock``. Returns the archive,
    or None when the dump left none (the tests then run without one)."""
    archive = archive_path()
    if archive is None:
        return None
    FOLDER.mkdir(exist_ok=True)
    with (FOLDER / "tests.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if archive.is_file():
            return archive
        for stale in FOLDER.glob("tests-*.jsa*"):
            stale.unlink()
        partial = archive.with_suffix(f".jsa.{os.getpid()}")
        dump(partial)
        if not partial.is_file():
            return None
        partial.replace(archive)
        return archive


def dump(to: Path) -> None:
    """One small job run whose driver JVM writes the classes it loaded to `to` as it exits;
    its report goes to ``.cds/dump-run.md`` (a failure is printed, not raised)."""
    options = f"-XX:ArchiveClassesAtExit={to} -Xlog:disable"
    argv = [sys.executable, "-m", "tests.benchmark.run", "--sizes", "2x20", "--repeats", "1",
            "--contenders", "job", "--no-probe",
            "--spark-conf", f"spark.driver.extraJavaOptions={options}",
            "--out", str(FOLDER / "dump-run.md"), "--json", str(FOLDER / "dump-run.json")]
    env = {k: v for k, v in os.environ.items() if k != "SPARK_SUBMIT_OPTS"}  # no archive in
    done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        print(f"no CDS archive: the dump run exited {done.returncode}\n{done.stderr[-2000:]}",
              file=sys.stderr)


if __name__ == "__main__":
    made = build()
    print(f"CDS archive: {made}" if made else "CDS archive: none (the JVMs start without)")
