"""Attacks on ``redis-stream-recovery init`` (recovery.starter, recovery.cli.init_command)
and on the handler shipping (recovery.cli.local_modules), through the installed command."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from recovery.cli.init_command import init_main
from recovery.cli.local_modules import with_shipped_modules
from tests.support.airflow_runs import AIRFLOW_PYTHON

COMMAND = str(Path(sys.executable).parent / "redis-stream-recovery")
ROOT = Path(__file__).resolve().parents[3]


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


@pytest.mark.slow
@pytest.mark.airflow
@pytest.mark.skipif(not AIRFLOW_PYTHON, reason="Airflow lives in its own venv: set "
                    "AIRFLOW_PYTHON=.venv-airflow/bin/python "
                    "(tests/integration/test_airflow_dag.py)")
def test_two_dags_on_one_schedule_get_different_job_run_ids():
    """Airflow's run ids are unique per DAG only: two copies of the DAG file (one per config)
    scheduled every 15 minutes both run ``scheduled__<time>`` at the same run_after, with the
    same task id and try: the job run ids must still differ (else the second is refused as a
    reused --run-id against one Redis, or two runs share one id in the dead letters)."""
    script = (
        "import sys, json\n"
        f"sys.path.insert(0, {str(ROOT / 'dags')!r})\n"
        "from datetime import datetime, timezone\n"
        "import redis_stream_recovery as d\n"
        "after = datetime(2026, 12, 2, 2, 15, tzinfo=timezone.utc)\n"
        "run = 'scheduled__2026-12-02T02:15:00+00:00'\n"
        "print(json.dumps([d.job_run_id(dag, run, after, 'recover', 1)\n"
        "                  for dag in ('recover_orders', 'recover_payments')]))\n")
    done = subprocess.run([str(AIRFLOW_PYTHON), "-c", script], capture_output=True,
                          text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    orders, payments = json.loads(done.stdout.splitlines()[-1])
    assert orders != payments
    assert orders.startswith("20261202T021500Z-recover-1-") and len(orders) == 35


def test_a_file_system_without_hard_links_still_gets_the_files(tmp_path, monkeypatch, capsys):
    """FAT, VirtualBox shared folders and some network shares refuse link(2) with EPERM: init
    writes there all the same, still never over a file that exists."""
    import errno
    import os

    def no_links(source: object, target: object) -> None:
        raise PermissionError(errno.EPERM, "Operation not permitted", str(target))

    monkeypatch.setattr(os, "link", no_links)
    assert init_main([str(tmp_path), "--with", "all"]) == 0, capsys.readouterr()
    for path in ("conf/recovery.toml", "conf/alerts.yml", "conf/grafana-dashboard.json",
                 "dags/redis_stream_recovery.py"):
        assert (tmp_path / path).read_bytes() == (ROOT / path).read_bytes()
    assert sorted(p.name for p in tmp_path.rglob(".*")) == []  # no temporary left
    capsys.readouterr()

    def theirs_appears(source: object, target: object) -> None:  # between check and place
        Path(str(target)).write_text("theirs\n")
        no_links(source, target)

    monkeypatch.setattr(os, "link", theirs_appears)
    assert init_main([str(tmp_path / "b")]) == 2
    assert (tmp_path / "b/conf/recovery.toml").read_text() == "theirs\n"
    assert [p.name for p in (tmp_path / "b/conf").iterdir()] == ["recovery.toml"]


def test_a_py_file_beside_a_package_of_its_name_is_not_shipped(tmp_path, monkeypatch, capsys):
    """``./pkg/__init__.py`` and ``./pkg.py``: Python here imports the package (a directory
    wins over a module of its name), so shipping pkg.py would run another handler on the
    executors than the one the user tried."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("RECOVERY_HANDLER__PATH", raising=False)
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg/__init__.py").write_text("def handle(messages):\n    return []\n")
    (tmp_path / "pkg.py").write_text("def handle(messages):\n    raise SystemExit(1)\n")
    spark = ["--master", "local[2]"]

    shipped = with_shipped_modules("run", ["--set", "streams.keys=orders",
                                           "--set", "handler.path=pkg:handle"], spark)

    assert shipped == spark
    assert "shipping" not in capsys.readouterr().err


@pytest.mark.parametrize("given", ["{link}/myhandlers.py", "hdfs:///apps/myhandlers.py"])
def test_a_py_file_the_user_lists_under_another_path_is_not_shipped_twice(
        tmp_path, monkeypatch, capsys, given):
    """The user's own ``--py-files`` names myhandlers.py by a path through a symbolic link
    (or another copy): two entries of one file name make spark-submit die with a Java
    FileAlreadyExistsException (exit 1, no JSON line). The user's own entry wins."""
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    (tmp_path / "real/myhandlers.py").write_text("def handle(messages):\n    return []\n")
    monkeypatch.chdir(tmp_path / "link")
    monkeypatch.delenv("RECOVERY_HANDLER__PATH", raising=False)
    spark = ["--master", "local[1]", "--py-files", given.format(link=tmp_path / "link")]

    shipped = with_shipped_modules("dry-run", ["--set", "streams.keys=orders",
                                               "--set", "handler.path=myhandlers:handle"],
                                   spark)

    assert shipped == spark
    assert "shipping" not in capsys.readouterr().err


def test_an_abbreviated_config_option_still_ships_the_handler(tmp_path, monkeypatch):
    """The job takes ``--conf FILE`` (argparse's abbreviation of --config): the shipping's
    look-up read no config then, shipped nothing, and the job said the module does not
    import although "redis-stream-recovery ships a <module>.py of the working directory"."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("RECOVERY_HANDLER__PATH", raising=False)
    (tmp_path / "myhandlers.py").write_text("def handle(messages):\n    return []\n")
    (tmp_path / "recovery.toml").write_text('[streams]\nkeys = ["orders"]\n'
                                            '[handler]\npath = "myhandlers:handle"\n')
    spark = ["--master", "local[1]"]

    for args in (["--conf", "recovery.toml"], ["--conf=recovery.toml"], ["--co", "recovery.toml"]):
        assert with_shipped_modules("run", args, spark) == [
            *spark, "--py-files", str(tmp_path / "myhandlers.py")], args


def test_a_working_directory_removed_under_the_command_is_one_line(tmp_path, monkeypatch):
    """``cd build; rm -rf ../build; redis-stream-recovery run ...``: the look-up for handler
    modules read the working directory first and died with a FileNotFoundError traceback."""
    (tmp_path / "gone").mkdir()
    monkeypatch.delenv("RECOVERY_HANDLER__PATH", raising=False)
    done = subprocess.run(
        ["sh", "-c", f'cd gone && rmdir ../gone && exec "{COMMAND}" dry-run --set '
         'streams.keys=orders --set handler.path=myhandlers:handle -- --master "local[1]"'],
        cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False)

    assert done.returncode == 2, (done.stdout, done.stderr)
    assert "Traceback" not in done.stderr
    assert "working directory" in json.loads(done.stdout.splitlines()[-1])["error"]


def test_a_working_directory_module_an_installed_one_hides_is_named(tmp_path, monkeypatch,
                                                                      capsys):
    """``./email.py`` with ``handler.path = "email:handle"``: the job imports the standard
    library's email and says "'handle' is not a callable in 'email'"; the file the user
    wrote is never mentioned. One stderr line says it is not shipped, and why."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("RECOVERY_HANDLER__PATH", raising=False)
    (tmp_path / "email.py").write_text("def handle(messages):\n    return []\n")
    spark = ["--master", "local[1]"]

    shipped = with_shipped_modules("run", ["--set", "streams.keys=orders",
                                           "--set", "handler.path=email:handle"], spark)

    assert shipped == spark  # never shadowed
    err = capsys.readouterr().err
    assert f"{tmp_path / 'email.py'} is not shipped" in err and "rename" in err


def test_a_build_from_a_checkout_without_symbolic_links_is_refused(tmp_path, monkeypatch,
                                                                     capsys):
    """Cloned with ``core.symlinks=false`` (Windows, some CI caches), recovery/starter's links
    are small text files holding their targets' paths, and a wheel built there ships them:
    init wrote a "config" reading ``../../conf/recovery.toml``. Refused instead, nothing
    written."""
    import recovery.starter as starter

    package = tmp_path / "package"
    package.mkdir()
    for file in starter.STARTER_FILES:
        (package / file.resource).write_text(f"../../{file.path}")  # what git writes then
    monkeypatch.setattr(starter.resources, "files", lambda _: package)

    assert init_main([str(tmp_path / "out")]) == 1
    error = json.loads(capsys.readouterr().out.splitlines()[-1])["error"]
    assert "symbolic link" in error and "conf/recovery.toml" in error
    assert not (tmp_path / "out").exists()
