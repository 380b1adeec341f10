"""Attacks on ``redis-stream-recovery init`` (recovery.starter, recovery.jobs.init_command)
and on the handler shipping (recovery.jobs.local_modules), through the installed command."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from recovery.jobs.init_command import init_main

COMMAND = str(Path(sys.executable).parent / "redis-stream-recovery")
ROOT = Path(__file__).resolve().parent.parent


def run_init(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([COMMAND, "init", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=120, check=False)


def test_an_unknown_with_name_beside_all_is_refused(tmp_path):
    done = run_init(tmp_path, "d", "--with", "all,bogus")

    assert done.returncode == 2, done.stdout
    assert "bogus" in done.stderr
    assert not (tmp_path / "d").exists()


def test_force_over_a_directory_in_the_way_leaves_the_users_config_alone(tmp_path):
    (tmp_path / "conf/alerts.yml").mkdir(parents=True)  # a directory where a file goes
    mine = tmp_path / "conf/recovery.toml"
    mine.write_text("my edited config\n")

    done = run_init(tmp_path, ".", "--with", "alerts", "--force")

    assert done.returncode == 1, done.stdout
    assert "alerts.yml" in done.stderr and "nothing written" in done.stderr
    assert mine.read_text() == "my edited config\n"  # the error said nothing was written
    assert (tmp_path / "conf/alerts.yml").is_dir()
    assert sorted(p.name for p in (tmp_path / "conf").iterdir()) == ["alerts.yml",
                                                                     "recovery.toml"]


def test_in_process_entry_is_the_same(tmp_path, capsys):
    assert init_main([str(tmp_path / "x"), "--with", "all,bogus"]) == 2
    assert json.loads(capsys.readouterr().out.splitlines()[-1])["status"] == "error"


def test_a_working_directory_with_a_comma_is_refused_not_split_into_two_py_files(
        tmp_path, monkeypatch):
    folder = tmp_path / "team,a"  # spark-submit splits --py-files (and spark.submit.pyFiles)
    folder.mkdir()               # on commas: "/…/team" and "a/myhandlers.py"
    (folder / "myhandlers.py").write_text("def handle(messages):\n    return []\n")
    (folder / "recovery.toml").write_text('[streams]\nkeys = ["orders"]\n'
                                          '[handler]\npath = "myhandlers:handle"\n')
    monkeypatch.delenv("RECOVERY_HANDLER__PATH", raising=False)

    done = subprocess.run([COMMAND, "dry-run", "--config", "recovery.toml", "--",
                           "--master", "local[1]", "--py-files", "other.zip"],
                          cwd=folder, capture_output=True, text=True, timeout=300,
                          check=False)

    assert done.returncode == 2, (done.stdout, done.stderr)
    assert "comma" in done.stderr and "myhandlers.py" in done.stderr
    assert done.stderr.count("error:") == 1
    assert json.loads(done.stdout.splitlines()[-1])["status"] == "error"
