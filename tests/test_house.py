"""House rules that CI enforces beside ruff and mypy (``make lint``): runtime modules stay
small enough to read in one sitting."""

from __future__ import annotations

from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "recovery"
MAX_LINES = 400


@pytest.mark.parametrize("module", sorted(PACKAGE.rglob("*.py")), ids=lambda p: p.name)
def test_runtime_module_is_under_the_house_limit(module: Path) -> None:
    lines = len(module.read_text(encoding="utf-8").splitlines())
    assert lines <= MAX_LINES, (
        f"{module.relative_to(PACKAGE.parent)} has {lines} lines (limit {MAX_LINES}): "
        "split it by concern")


def test_the_job_never_imports_its_test_tooling() -> None:
    """recovery/testing/ (throwaway servers, seeded backlogs) is for the demo, notebook and
    tests: no module of the job itself imports it."""
    runtime = [m for m in PACKAGE.rglob("*.py") if "testing" not in m.relative_to(PACKAGE).parts]
    offenders = [m.name for m in runtime if "recovery.testing" in m.read_text(encoding="utf-8")]
    assert offenders == []
