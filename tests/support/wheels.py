"""The package as users get it: a wheel built from the tree as committed, and a Python that
has the dependencies but not the checkout (tests/integration/test_packaging.py,
tests/integration/test_notebook.py, tests/integration/test_first_hour.py).

The wheel and the Python it is installed into are made once per ``pytest`` run, however many
xdist workers ask (:func:`made_once`: conftest's session fixtures ``wheel_zip`` and
``wheel_python``), and only read after that."""

from __future__ import annotations

import fcntl
import json
import shutil
import site
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent


def build_wheel_zip(out: Path, source: Path) -> Path:
    """``pip wheel . --no-deps`` of a copy of the tree in `source` (no stale build/ dir), the
    wheel copied to `out` under a ``.zip`` name (what ``spark-submit --py-files`` ships).
    Both directories are made if missing."""
    out.mkdir(parents=True, exist_ok=True)
    source.mkdir(parents=True, exist_ok=True)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    shutil.copytree(ROOT / "recovery", source / "recovery",
                    ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", str(source), "--no-deps", "-q",
                    "-w", str(out)], check=True, capture_output=True, timeout=300)
    [wheel] = out.glob("redis_stream_recovery-*.whl")
    return Path(shutil.copy(wheel, out / "redis_stream_recovery.zip"))


def deps_only_python(where: Path) -> str:
    """A venv that sees this venv's site-packages through a .pth line, so its dependencies
    import, but not the editable install of `recovery` (a .pth inside a .pth'd directory is
    not processed)."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where)], check=True)
    python = str(where / "bin" / "python")
    code = "import sysconfig; print(sysconfig.get_path('purelib'))"
    purelib = subprocess.run([python, "-c", code], check=True, capture_output=True,
                             text=True).stdout.strip()
    Path(purelib, "project-deps.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    return python


def install_wheel(wheel_zip: Path, python: str) -> None:
    """pip-install the wheel (`wheel_zip`, under its .zip name) into `python`'s venv;
    ``--ignore-installed``: the checkout's editable install, seen through the .pth, stays."""
    wheel = wheel_zip.with_name("redis_stream_recovery-0.1.0-py3-none-any.whl")
    shutil.copy(wheel_zip, wheel)
    subprocess.run([sys.executable, "-m", "pip", "--python", python, "install", "--no-deps",
                    "--ignore-installed", "-q", str(wheel)], check=True, capture_output=True,
                   timeout=300)


def made_once(root: Path, name: str, make: Callable[[Path], str]) -> str:
    """What ``make(root / name)`` returns (a path or interpreter, as text), made by the first
    caller only: the others (xdist workers sharing `root`, the run's common temp directory)
    wait on an exclusive ``flock`` of ``root / f"{name}.lock"`` and read the result the first
    one recorded in ``root / f"{name}.json"``. A failed `make` records nothing: the next
    caller tries again (and fails the same way, in its own test)."""
    result = root / f"{name}.json"
    with (root / f"{name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if result.exists():
            return str(json.loads(result.read_text()))
        where = root / name
        shutil.rmtree(where, ignore_errors=True)  # what a failed try left
        where.mkdir()
        made = make(where)
        result.write_text(json.dumps(made))
        return made


def wheel_installed_python(wheel_zip: Path, where: Path) -> str:
    """A deps-only Python (:func:`deps_only_python`) in ``where / "venv"`` with the wheel
    installed: the interpreter's path."""
    python = deps_only_python(where / "venv")
    install_wheel(wheel_zip, python)
    return python
