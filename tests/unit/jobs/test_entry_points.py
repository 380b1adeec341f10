"""The three spark-submit entry points (``recovery.jobs.recover``, ``recovery.jobs.redrive``,
``recovery.jobs.dead_letters``, the job classes' modules) called as spark-submit calls
them: the exit code is the contract with schedulers, and a config file that is not there is
2 (bad config), with one line naming it. Their whole runs: tests/integration/test_cli.py."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest

import recovery.cli.main
from recovery.jobs import dead_letters, recover, redrive, submit


@pytest.mark.parametrize("job", [recover, redrive, dead_letters],
                         ids=["recover", "redrive", "dead_letters"])
def test_a_config_file_that_is_not_there_exits_2_naming_it(job: ModuleType, tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]):
    missing = tmp_path / "missing.toml"
    assert job.main(["--config", str(missing)]) == 2
    assert "missing.toml" in capsys.readouterr().err


def test_the_command_keeps_its_older_name() -> None:
    """``recovery.jobs.submit:main`` (``python -m recovery.jobs.submit``, older installs'
    entry points) is the command of recovery.cli.main."""
    assert submit.main is recovery.cli.main.main
