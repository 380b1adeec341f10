"""``redis-stream-recovery init [DIR]`` (recovery.cli.init_command, recovery.starter): the
checkout's own starter files, never an overwrite without --force, all or nothing. The wheel's
copies are compared with the checkout's in tests/integration/test_first_hour.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from recovery.cli.main import main
from recovery.starter import STARTER_FILES, starter_text

ROOT = Path(__file__).resolve().parents[3]
EVERY = ["conf/recovery.toml", "conf/alerts.yml", "conf/grafana-dashboard.json",
         "dags/redis_stream_recovery.py"]


def files_under(directory: Path) -> list[str]:
    return sorted(str(p.relative_to(directory)) for p in directory.rglob("*") if p.is_file())


def init(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["init", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_the_shipped_files_are_the_checkouts():
    for file in STARTER_FILES:
        assert starter_text(file.resource) == (ROOT / file.path).read_bytes(), file.path


def test_init_writes_the_config_and_on_request_the_rest(tmp_path, capsys):
    code, out, _ = init(capsys, str(tmp_path / "a"))
    assert code == 0
    assert files_under(tmp_path / "a") == ["conf/recovery.toml"]
    assert (tmp_path / "a/conf/recovery.toml").read_bytes() == \
        (ROOT / "conf/recovery.toml").read_bytes()
    assert json.loads(out.splitlines()[-1]) == {
        "status": "ok", "written": [str(tmp_path / "a/conf/recovery.toml")]}

    code, _, _ = init(capsys, str(tmp_path / "b"), "--with", "alerts,dag")
    assert (code, files_under(tmp_path / "b")) == (0, [
        "conf/alerts.yml", "conf/recovery.toml", "dags/redis_stream_recovery.py"])
    code, _, _ = init(capsys, str(tmp_path / "c"), "--with", "all")
    assert (code, files_under(tmp_path / "c")) == (0, sorted(EVERY))
    for path in EVERY:
        assert (tmp_path / "c" / path).read_bytes() == (ROOT / path).read_bytes()


def test_an_existing_file_refuses_the_whole_call_unless_forced(tmp_path, capsys):
    (tmp_path / "dags").mkdir()
    mine = tmp_path / "dags" / "redis_stream_recovery.py"
    mine.write_text("my own DAG\n")

    code, out, err = init(capsys, str(tmp_path), "--with", "all")

    assert code == 2
    assert err.count("\n") == 1 and str(mine) in err and "--force" in err, err
    assert json.loads(out.splitlines()[-1])["exit_code"] == 2
    assert files_under(tmp_path) == ["dags/redis_stream_recovery.py"]  # nothing else written
    assert mine.read_text() == "my own DAG\n"

    code, _, _ = init(capsys, str(tmp_path), "--with", "all", "--force")
    assert (code, files_under(tmp_path)) == (0, sorted(EVERY))
    assert mine.read_bytes() == (ROOT / "dags/redis_stream_recovery.py").read_bytes()


def test_an_unknown_name_is_refused_naming_the_valid_ones(tmp_path, capsys):
    code, _, err = init(capsys, str(tmp_path), "--with", "alerts,grafana")
    assert code == 2
    assert "--with grafana: unknown; use any of alerts,dashboard,dag or all" in err
    assert files_under(tmp_path) == []


def test_a_failure_midway_leaves_nothing_behind(tmp_path, capsys):
    """The config's directory can be made, the DAG's cannot (a file holds its name): the
    config written first is removed again, and the directory made for it."""
    (tmp_path / "dags").write_text("a file where the DAG folder would go\n")

    code, _, err = init(capsys, str(tmp_path), "--with", "dag")

    assert code == 1
    assert "nothing written" in err and err.count("\n") == 1, err
    assert files_under(tmp_path) == ["dags"]
    assert not (tmp_path / "conf").exists()
