"""What a fresh interpreter holds in ``sys.modules`` after running some code: the tests that
keep a module light (the package face, the daemon module, a run's summary, the command
line) run it in a new process, since this one has long imported everything."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import NamedTuple

# What a start that needs no Spark must not load: Spark, its gateway and the columnar stack.
SPARK_STACK = ("pyspark", "py4j", "pyarrow", "numpy", "pandas")
_MARK = "modules held at the end: "


class Fresh(NamedTuple):
    """What a fresh interpreter did: the lines it printed to stdout, its stderr, and the
    modules it held at its end, sorted."""

    lines: list[str]
    stderr: str
    modules: list[str]


def run_fresh(code: str, cwd: Path | None = None) -> Fresh:
    """Run `code` in a new interpreter (this one's, from `cwd`). Raises CalledProcessError
    if it fails."""
    done = subprocess.run(
        [sys.executable, "-c", f"{code}\nimport json as _j, sys as _s\n"
                               f"print({_MARK!r} + _j.dumps(sorted(_s.modules)))"],
        capture_output=True, text=True, check=True, cwd=cwd)
    *lines, last = done.stdout.splitlines()
    assert last.startswith(_MARK), done.stdout
    return Fresh(lines, done.stderr, list(json.loads(last.removeprefix(_MARK))))


def loaded_by(modules: list[str]) -> list[str]:
    """Every module a fresh interpreter holds after importing `modules`."""
    return run_fresh(f"import importlib\nfor name in {modules!r}:\n"
                     "    importlib.import_module(name)").modules


def among(modules: Iterable[str], packages: Iterable[str]) -> list[str]:
    """The top-level packages of `packages` that `modules` hold (``pyspark.sql`` counts as
    ``pyspark``), sorted."""
    wanted = set(packages)
    return sorted({m.split(".")[0] for m in modules} & wanted)
