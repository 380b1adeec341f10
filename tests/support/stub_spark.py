"""A stand-in Spark installation for tests of the command line: its ``spark-submit`` prints
``STARTED`` and its arguments, then a JSON line, and exits 0 (no JVM starts); its conf
directory is empty (no ``spark-defaults.conf`` naming a master)."""

from __future__ import annotations

from pathlib import Path

STARTED = "STUB spark-submit started"


def stub_spark_home(directory: Path) -> Path:
    """Make the stand-in under `directory` (``stub-spark/``): its SPARK_HOME."""
    home = directory / "stub-spark"
    (home / "bin").mkdir(parents=True)
    (home / "conf").mkdir()
    stub = home / "bin" / "spark-submit"
    stub.write_text(f"#!/bin/sh\necho '{STARTED}' \"$@\"\necho '{{\"status\": \"stub\"}}'\n")
    stub.chmod(0o755)
    return home
