"""The package's public face (``recovery/__init__.py``): every name it lists loads, and
importing the package loads nothing heavy (Spark's Python workers import the package)."""

from __future__ import annotations

import subprocess
import sys

import recovery


def test_every_public_name_loads_from_the_package() -> None:
    assert set(recovery.__all__) == {"__version__", *recovery._HOMES}
    for name in recovery.__all__:
        assert getattr(recovery, name) is not None, name
    assert recovery.run.__module__ == "recovery.driver.job"  # the real thing, not a copy


def test_importing_the_package_loads_neither_spark_nor_pydantic() -> None:
    code = ("import sys, recovery; "
            "print(sorted(m for m in ('pyspark', 'pydantic', 'redis') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "[]"
