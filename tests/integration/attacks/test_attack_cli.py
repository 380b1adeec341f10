"""Attack tests (issue 61 parts 4-5): the installed command's checks before spark-submit must
agree with the job they stand in for, and every option must be honoured or refused.

Most run ``python -m recovery`` (the installed command) with ``SPARK_HOME`` pointing at a stub
``spark-submit`` that only says it was started: whether the command reached spark-submit is
then what the check decided, in well under a second. The slow one runs the real job."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from recovery.testing.backlog import create_group
from recovery.testing.local_redis import LocalServer
from tests.support.stub_spark import STARTED, stub_spark_home

ROOT = Path(__file__).resolve().parents[3]
CLOSED_URL = "redis://127.0.0.1:1/0"  # nothing listens
SECRET = "hunter2-61"


@pytest.fixture
def stub_spark(tmp_path: Path) -> dict[str, str]:
    """The environment of a command whose spark-submit only prints STARTED and exits 0."""
    return {"SPARK_HOME": str(stub_spark_home(tmp_path))}


def command(*args: str, env: dict[str, str] | None = None, cwd: Path = ROOT
            ) -> subprocess.CompletedProcess[str]:
    """``redis-stream-recovery ARGS`` as ``python -m recovery``."""
    return subprocess.run([sys.executable, "-m", "recovery", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, **(env or {})})


def zipped_handler(tmp_path: Path, module: str) -> Path:
    """A zip holding only `module`.py, a handler that acks nothing (for --py-files)."""
    shipped = tmp_path / f"{module}.zip"
    with zipfile.ZipFile(shipped, "w") as zf:
        zf.writestr(f"{module}.py", "def handle(batch):\n    return {}\n")
    return shipped


def base(tmp_path: Path, module: str, url: str = CLOSED_URL) -> list[str]:
    return ["--set", "streams.keys=orders", "--set", f"redis.url={url}",
            "--set", f"report.path={tmp_path / 'reports'}",
            "--set", f"handler.path={module}:handle"]


# --- the check refuses what the job accepts -------------------------------------------------

@pytest.mark.parametrize("how", ["conf", "properties-file", "local-scheme", "file-one-slash"])
def test_a_handler_shipped_as_spark_submit_accepts_it_passes_the_check(
        tmp_path: Path, stub_spark: dict[str, str], how: str):
    """spark-submit puts these on the driver's path (client mode): ``--conf
    spark.submit.pyFiles=Z``, the same in a ``--properties-file``, ``--py-files local:/Z`` and
    ``--py-files file:/Z``; the job imports the handler and runs (see the slow test below).
    The check before spark-submit refused each as 'does not import', exit 2."""
    module = f"atk_shipped_{how.replace('-', '_')}"
    shipped = zipped_handler(tmp_path, module)
    props = tmp_path / "spark.conf"
    props.write_text(f"spark.submit.pyFiles {shipped}\n")
    spark = {"conf": ["--conf", f"spark.submit.pyFiles={shipped}"],
             "properties-file": ["--properties-file", str(props)],
             "local-scheme": ["--py-files", f"local:{shipped}"],
             "file-one-slash": ["--py-files", f"file:{shipped}"]}[how]
    done = command("dry-run", *base(tmp_path, module), "--", *spark, env=stub_spark)
    assert STARTED in done.stdout, done.stdout + done.stderr
    assert done.returncode == 0, done.stderr


def test_a_driver_python_of_its_own_is_where_the_handler_is_imported(
        tmp_path: Path, stub_spark: dict[str, str]):
    """``PYSPARK_PYTHON`` (the command keeps the user's) is the driver's interpreter; a
    handler importable there (here: a wrapper adding its directory to the path) runs under
    the job. The check imported it in the command's own Python and refused it, exit 2."""
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "atk_driver_only.py").write_text("def handle(batch):\n    return {}\n")
    driver_python = tmp_path / "driver-python"
    driver_python.write_text(f"#!/bin/sh\nexport PYTHONPATH={tmp_path / 'site'}\n"
                             f"exec {sys.executable} \"$@\"\n")
    driver_python.chmod(0o755)
    done = command("dry-run", *base(tmp_path, "atk_driver_only"),
                   env={**stub_spark, "PYSPARK_PYTHON": str(driver_python)})
    assert STARTED in done.stdout, done.stdout + done.stderr


def test_cluster_deploy_mode_set_by_conf_skips_the_check_as_the_option_does(
        tmp_path: Path, stub_spark: dict[str, str]):
    """``--conf spark.submit.deployMode=cluster`` is ``--deploy-mode cluster``: the driver's
    modules are the cluster's, so the handler is not imported here."""
    done = command("dry-run", *base(tmp_path, "atk_only_on_the_cluster"),
                   "--", "--conf", "spark.submit.deployMode=cluster", env=stub_spark)
    assert STARTED in done.stdout, done.stdout + done.stderr


@pytest.mark.slow
def test_the_job_runs_with_a_handler_in_spark_submit_py_files_conf(
        tmp_path: Path, redis_server: LocalServer):
    """What the check must not refuse: the command passes the check, hands ``--conf
    spark.submit.pyFiles=Z`` (the handler only in Z) to the real spark-submit, and the job
    under it plans a real server's stuck entry (exit 0, status ok) and changes nothing. One
    process: the job's own run under spark-submit is this one, after the check."""
    client = redis_server.client()
    client.xadd("orders", {"a": "1"})
    client.xgroup_create("orders", "g", id="0")
    client.xreadgroup("g", "c1", {"orders": ">"})
    shipped = zipped_handler(tmp_path, "atk_conf_shipped")
    args = [*base(tmp_path, "atk_conf_shipped", redis_server.url), "--set",
            "claim.min_idle_ms=1"]
    done = command("dry-run", *args, "--", "--master", "local[1]", "--conf",
                   f"spark.submit.pyFiles={shipped}", cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    last = json.loads(done.stdout.strip().splitlines()[-1])
    assert (last["status"], last["dry_run"]) == ("ok", True)
    assert last["totals"]["would_reprocess"] == 1
    assert client.xpending("orders", "g")["pending"] == 1


# --- the check passes what the job refuses --------------------------------------------------

def test_a_handler_in_the_working_directory_is_judged_as_the_job_judges_it(
        tmp_path: Path, stub_spark: dict[str, str]):
    """Under ``python -m recovery`` the working directory is on this Python's path, not on
    the driver's (its script's directory is ``recovery/jobs``): the job alone would refuse
    the handler after a JVM start. So the command either refuses it first or ships it to
    the driver and executors: it ships a working-directory module with ``--py-files``
    (``recovery.cli.local_modules``), so spark-submit gets exactly that file."""
    (tmp_path / "atk_cwd_handler.py").write_text("def handle(batch):\n    return {}\n")
    done = command("run", *base(tmp_path, "atk_cwd_handler"), env=stub_spark, cwd=tmp_path)
    shipped = f"{STARTED} --py-files {tmp_path / 'atk_cwd_handler.py'} "
    assert shipped in done.stdout, "the handler the job cannot import was not shipped"
    assert done.returncode == 0, done.stderr


@pytest.mark.slow
def test_dead_letters_report_path_not_writable_is_refused_before_spark(
        tmp_path: Path, stub_spark: dict[str, str]):
    """jobs/dead_letters.py refuses it (check_report_location, exit 2) after the JVM start;
    the README says the command checks the report path first."""
    (tmp_path / "a-file").write_text("")
    done = command("dead-letters", "--set", "streams.keys=orders", "--set",
                   f"redis.url={CLOSED_URL}", "--set",
                   f"report.path={tmp_path / 'a-file' / 'reports'}", env=stub_spark)
    assert STARTED not in done.stdout, "the job refuses this after a JVM start"
    assert done.returncode == 2 and "not a writable directory" in done.stderr, done.stderr


def test_redrive_empty_range_is_refused_before_spark(tmp_path: Path,
                                                     stub_spark: dict[str, str]):
    """jobs/redrive.py refuses it (a config error, exit 2) after the JVM start."""
    done = command("redrive", "--set", "streams.keys=orders", "--set", f"redis.url={CLOSED_URL}",
                   "--set", "redrive.from_id=5-0", "--set", "redrive.to_id=1-0",
                   env=stub_spark)
    assert STARTED not in done.stdout, "the job refuses this after a JVM start"
    assert done.returncode == 2 and "redrive range is empty" in done.stderr, done.stderr


# --- options a command cannot honour --------------------------------------------------------

@pytest.mark.parametrize("option", [["--run-id", "r1"], ["--log-level", "DEBUG"]])
def test_config_refuses_the_options_it_does_not_act_on(option: list[str]):
    done = command("config", "--set", "streams.keys=orders", *option)
    assert done.returncode == 2, done.stdout + done.stderr
    assert option[0] in done.stderr


@pytest.mark.parametrize("second", [["--plan", "B"], ["--plan=B"], ["--pla", "B"]])
def test_apply_with_a_second_plan_is_refused_not_one_of_them_ignored(
        tmp_path: Path, stub_spark: dict[str, str], second: list[str]):
    """``apply A --plan B`` applied B (argparse keeps the last ``--plan``), silently."""
    done = command("apply", str(tmp_path / "A"), "--set", "streams.keys=orders",
                   "--set", f"redis.url={CLOSED_URL}", "--set", f"report.path={tmp_path}",
                   "--set", "handler.path=recovery.handlers:example_handler", *second,
                   env=stub_spark)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "--plan" in done.stderr and "B: no such directory" not in done.stderr, done.stderr


# --- secrets --------------------------------------------------------------------------------

@pytest.mark.parametrize("item", [f"redis_password={SECRET}", f"redis.password.x={SECRET}",
                                  f"redis.password:{SECRET}", f"redis..password={SECRET}"])
def test_a_malformed_set_never_prints_its_value(item: str, stub_spark: dict[str, str]):
    """A typo'd ``--set`` of a password is refused, naming the key, never the value (stderr,
    and the JSON line an Airflow task keeps as its XCom), by the command itself: no
    spark-submit starts (the stub's would exit 0)."""
    done = command("run", "--set", "streams.keys=orders", "--set", item, env=stub_spark)
    assert done.returncode == 2, done.stdout + done.stderr
    assert STARTED not in done.stdout
    assert "section.field=value" in done.stderr, done.stderr
    assert SECRET not in done.stdout + done.stderr


# --- what the operator is told --------------------------------------------------------------

@pytest.mark.parametrize("args", [["frobnicate"], ["apply"], ["apply", "--set", "claim.count=5"]])
def test_the_commands_own_refusals_end_with_the_json_error_line(args: list[str],
                                                               stub_spark: dict[str, str]):
    """README: stdout's last line is always JSON, the error's when the job could not run
    (the Airflow task's XCom); an unknown command or ``apply`` without its plan printed
    nothing on stdout. The command's own: no spark-submit starts."""
    done = command(*args, env=stub_spark)
    assert done.returncode == 2, done.stdout + done.stderr
    assert STARTED not in done.stdout
    assert done.stderr.startswith("error: "), done.stderr
    last = json.loads((done.stdout.strip().splitlines() or ["null"])[-1])
    assert last and (last["status"], last["exit_code"]) == ("error", 2), done.stdout


@pytest.mark.parametrize("option", [["--set", "claim.count=5"], ["--run-id", "r1"],
                                    ["--dry-run"], ["--config=c.toml"]])
def test_a_job_option_after_the_dashes_is_refused_as_a_bad_argument(
        tmp_path: Path, stub_spark: dict[str, str], option: list[str]):
    """``run ... -- --master yarn --set claim.count=5``: spark-submit got ``--set`` and
    stopped (exit 1, its usage on stderr, stdout empty: no JSON line), 2 s after a JVM
    start. A job option on spark-submit's side is a bad argument: exit 2, named, here."""
    done = command("dry-run", "--set", "streams.keys=orders", "--set", f"redis.url={CLOSED_URL}",
                   "--set", f"report.path={tmp_path}", "--", "--master", "local[1]", *option,
                   env=stub_spark)
    assert STARTED not in done.stdout, "spark-submit refuses it (exit 1, no JSON line)"
    assert done.returncode == 2, done.stdout + done.stderr
    assert option[0].partition("=")[0] in done.stderr, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1])["exit_code"] == 2


@pytest.mark.parametrize("db", ["\u00b2", "\uff11"])  # superscript two, fullwidth one
def test_a_database_number_in_other_digits_is_refused_not_read_as_another(
        redis_server: LocalServer, tmp_path: Path, db: str):
    """``redis://host:port/²`` passed the check (str.isdigit) and redis-py, failing int('²'),
    silently connected to database 0: the run would recover another database's streams.
    (fullwidth ``/1`` happened to be db 1.) A database is ASCII digits, else exit 2 before Redis."""
    client = redis_server.client()
    client.xadd("orders", {"a": "1"})  # database 0: what the run would have touched
    client.xgroup_create("orders", "g", id="0")
    client.xreadgroup("g", "c1", {"orders": ">"})
    done = command("config", "--set", "streams.keys=orders",
                   "--set", f"redis.url={redis_server.url.rsplit('/', 1)[0]}/{db}")
    assert done.returncode == 2, done.stdout + done.stderr
    assert "redis.url names database" in done.stderr, done.stderr
    assert client.xpending("orders", "g")["pending"] == 1


TWICE = {"config": ["--config", "a.toml", "--config", "b.toml"],
         "run-id": ["--run-id", "a", "--run-id", "b"]}


# config takes no --run-id at all (refused by test_config_refuses_the_options_it_does_not_act_on)
@pytest.mark.parametrize(("job", "twice"), [
    (job, TWICE[option]) for job in ("run", "redrive", "dead-letters", "config")
    for option in TWICE if (job, option) != ("config", "run-id")])
def test_an_option_of_one_value_given_twice_is_refused_not_the_first_dropped(
        tmp_path: Path, stub_spark: dict[str, str], job: str, twice: list[str]):
    """``--config base.toml --config prod.toml`` ran with prod.toml alone (argparse keeps
    the last; some tools merge both); ``--run-id`` twice, the first dropped. Refused, exit 2."""
    for name in ("a.toml", "b.toml"):
        (tmp_path / name).write_text('[streams]\nkeys = ["orders"]\n')
    done = command(job, *twice, "--set", f"redis.url={CLOSED_URL}", "--set",
                   f"report.path={tmp_path}", "--set", "reprocess.mode=requeue",
                   "--set", "reprocess.requeue_stream=retry", env=stub_spark, cwd=tmp_path)
    assert STARTED not in done.stdout, "one of the two values was dropped, silently"
    assert done.returncode == 2 and "twice" in done.stderr, done.stdout + done.stderr


@pytest.mark.slow
def test_a_variable_with_one_underscore_for_two_is_refused_not_ignored():
    """``RECOVERY_CLAIM_MIN_IDLE_MS=600000`` (``_`` for ``__``) was ignored: the run claimed
    entries idle for 60 s, not the 10 min asked. It names a known setting: refused, with the
    variable's right name. Variables of the project's own (RECOVERY_NOTEBOOK_CONFIG, ...)
    name none and stay allowed."""
    done = command("config", "--set", "streams.keys=orders",
                   env={"RECOVERY_CLAIM_MIN_IDLE_MS": "600000"})
    assert done.returncode == 2, done.stdout
    assert "did you mean RECOVERY_CLAIM__MIN_IDLE_MS?" in done.stderr, done.stderr
    done = command("config", "--set", "streams.keys=orders",
                   env={"RECOVERY_NOTEBOOK_CONFIG": "x.toml", "RECOVERY_NOTEBOOK_REAL_RUN": "1",
                        "RECOVERY_FAULT_FILE": "f"})
    assert done.returncode == 0, done.stderr


@pytest.mark.slow
def test_a_sibling_of_a_py_file_in_py_files_is_not_shipped_with_it(
        tmp_path: Path, stub_spark: dict[str, str]):
    """``--py-files dir/a.py``: spark-submit copies a.py alone to a directory of its own for
    the driver (SPARK-24384), so a handler in dir/b.py does not import there (the job
    refuses it, exit 2, after a JVM start). The check put dir itself on the path and passed."""
    (tmp_path / "atk_shipped_a.py").write_text("X = 1\n")
    (tmp_path / "atk_sibling_b.py").write_text("def handle(batch):\n    return {}\n")
    done = command("run", *base(tmp_path, "atk_sibling_b"), "--",
                   "--py-files", str(tmp_path / "atk_shipped_a.py"), env=stub_spark)
    assert STARTED not in done.stdout, "the job cannot import the sibling"
    assert done.returncode == 2 and "atk_sibling_b" in done.stderr, done.stderr


def test_an_abbreviated_print_config_is_answered_once(stub_spark: dict[str, str]):
    """argparse takes ``--print-conf`` for ``--print-config``; the check (which skips only
    the full spelling) printed the settings and then started spark-submit, whose job
    printed them again: two config lines, a JVM start for nothing."""
    done = command("run", "--set", "streams.keys=orders", "--print-conf", env=stub_spark)
    assert done.returncode == 0, done.stderr
    printed = [line for line in done.stdout.splitlines() if line.startswith('{"claim"')]
    started = STARTED in done.stdout
    assert len(printed) + started == 1, done.stdout


@pytest.mark.slow
@pytest.mark.parametrize("module", ["recover", "job_options"])
def test_a_handler_module_named_like_a_job_module_is_refused_before_spark_submit(
        module, redis_server, stub_spark, tmp_path):
    """Found: ``./recover.py`` (``handler.path = "recover:handle"``, a file that defines
    ``handle``) was announced as shipped, then refused with "'handle' is not a callable in
    'recover'; name a function": the check imported the job module of that name, and the
    operator was told to fix a function that is there. Now: refused (exit 2, the JSON error
    line last, no spark-submit) naming the job module it collides with and the rename; the
    entries stay pending."""
    client = redis_server.client()
    create_group(client, "orders", "billing")
    client.xadd("orders", {"n": "1"})
    client.xreadgroup("billing", "c1", {"orders": ">"})
    (tmp_path / f"{module}.py").write_text("def handle(batch):\n    return {}\n")

    done = command("run", *base(tmp_path, module, redis_server.url), env=stub_spark,
                   cwd=tmp_path)

    assert done.returncode == 2, done.stdout + done.stderr
    assert STARTED not in done.stdout
    assert f"recovery/jobs/{module}.py" in done.stderr and "rename" in done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1])["exit_code"] == 2
    assert client.xpending("orders", "billing")["pending"] == 1
