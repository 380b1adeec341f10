"""The installed command checks before spark-submit (recovery.cli.precheck, through
``python -m recovery``, i.e. ``redis-stream-recovery``): a config typo, a handler that does not
import, a bad report path and a plan that cannot be applied are refused in this Python (Redis
is left to the job, which pushes its metrics), with the job's exit code and its ``error:``
line on stderr (under spark-submit it would land on stdout, merged by Spark's PythonRunner,
after a JVM start). Also the settings' language at that door: the nearest known key for an
unknown one (file, ``RECOVERY_*``, ``--set``), and ``--set section.field=`` unsetting an
optional setting."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from recovery.cli.precheck import answered_by_the_job, driver_elsewhere
from recovery.metrics.families import PREFIX
from tests.support.pushgateway import LocalPushgateway, pushed

ROOT = Path(__file__).resolve().parents[3]
CLOSED_URL = "redis://127.0.0.1:1/0"  # nothing listens
HINT = "did you mean claim.min_idle_ms?"
SPELLING = ("(check the spelling against conf/recovery.toml; `redis-stream-recovery init` "
            "writes it)")


def command(*args: str, env: dict[str, str] | None = None, cwd: Path = ROOT
            ) -> tuple[subprocess.CompletedProcess[str], float]:
    """``redis-stream-recovery ARGS`` (as ``python -m recovery``) and its wall time (s)."""
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "recovery", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, **(env or {})})
    return done, time.monotonic() - started


def refused_here(done: subprocess.CompletedProcess[str], code: int, text: str) -> None:
    """Refused before spark-submit: the error line on stderr (not stdout, where spark-submit
    would have put it), stdout's last line the JSON error, no Spark output anywhere."""
    assert done.returncode == code, done.stdout + done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and text in errors[0], done.stderr
    assert not [line for line in done.stdout.splitlines() if line.startswith("error: ")]
    last = json.loads(done.stdout.strip().splitlines()[-1])
    assert (last["status"], last["exit_code"]) == ("error", code) and text in last["error"]
    printed = done.stdout + done.stderr
    assert "log4j" not in printed and "jdk.incubator" not in printed, "a JVM started"


def test_a_typo_in_the_config_file_is_refused_on_stderr_before_spark(tmp_path: Path):
    conf = tmp_path / "c.toml"
    conf.write_text('[streams]\nkeys = ["orders"]\n[claim]\nmin_idle = 600000\n')
    home = tmp_path / "spark"
    (home / "bin").mkdir(parents=True)
    started = tmp_path / "spark-submit-started"
    stub = home / "bin" / "spark-submit"
    stub.write_text(f"#!/bin/sh\ntouch {started}\n")
    stub.chmod(0o755)
    done, _ = command("run", "--config", str(conf), env={"SPARK_HOME": str(home)})
    refused_here(done, 2, f"claim.min_idle: unknown setting, {HINT}")
    assert not started.exists(), "spark-submit was started for a config refused in Python"


@pytest.mark.slow
def test_a_typo_in_a_variable_or_a_set_names_the_nearest_key():
    done, _ = command("dry-run", "--set", "streams.keys=orders",
                      env={"RECOVERY_CLAIM__MIN_IDLE": "600000"})
    refused_here(done, 2, f"claim.min_idle: unknown setting, {HINT} "
                          f"{SPELLING} (from RECOVERY_CLAIM__MIN_IDLE)")
    done, _ = command("redrive", "--set", "streams.keys=orders", "--set", "claims.count=5")
    refused_here(done, 2, "claims: unknown setting, did you mean claim?")
    done, _ = command("dead-letters", "--set", "streams.keys=orders",
                      "--set", "claim.min_idle=1")
    refused_here(done, 2, f"{HINT} {SPELLING} (from --set)")


def test_a_variable_of_an_unknown_section_is_refused_not_ignored():
    """pydantic-settings alone ignores it: the run would go on with the default."""
    done, _ = command("dry-run", "--set", "streams.keys=orders", "--set",
                      f"redis.url={CLOSED_URL}", env={"RECOVERY_CLAIMS__MIN_IDLE_MS": "600000"})
    refused_here(done, 2, "claims: unknown setting, did you mean claim? "
                          "(from RECOVERY_CLAIMS__MIN_IDLE_MS)")


@pytest.mark.slow
def test_a_handler_that_does_not_import_is_refused_before_spark():
    done, _ = command("run", "--set", "streams.keys=orders", "--set", f"redis.url={CLOSED_URL}",
                      "--set", "handler.path=no_such_module_61:handle")
    refused_here(done, 2, "no_such_module_61")


@pytest.mark.slow
def test_a_handler_shipped_with_py_files_imports_from_there(tmp_path: Path):
    """The handler exists only in a --py-files file: the check imports it from there, as the
    driver would, and goes on to the next check, which refuses (a report path that is a
    file), still before any JVM."""
    (tmp_path / "shipped_handler_61.py").write_text("def handle(batch):\n    return {}\n")
    (tmp_path / "a-file").write_text("")
    done, _ = command("run", "--set", "streams.keys=orders", "--set", f"redis.url={CLOSED_URL}",
                      "--set", "handler.path=shipped_handler_61:handle",
                      "--set", f"report.path={tmp_path / 'a-file' / 'reports'}",
                      "--", "--py-files", str(tmp_path / "shipped_handler_61.py"))
    refused_here(done, 2, "is not a writable directory")


@pytest.mark.slow
def test_a_plan_that_cannot_be_applied_is_refused_before_spark(tmp_path: Path):
    """Without contacting Redis (nothing listens at the URL): the plan's own terms."""
    done, _ = command("apply", str(tmp_path / "no-such-plan"),
                      "--set", "streams.keys=orders", "--set", f"redis.url={CLOSED_URL}",
                      "--set", f"report.path={tmp_path / 'reports'}",
                      "--set", "handler.path=recovery.handlers:example_handler")
    refused_here(done, 2, f"--plan {tmp_path / 'no-such-plan'}: no such directory")


@pytest.mark.slow
def test_an_empty_set_unsets_an_optional_setting_from_the_file(tmp_path: Path):
    conf = tmp_path / "c.toml"
    conf.write_text('[streams]\nkeys = ["orders"]\n'
                    '[metrics]\npushgateway_url = "http://127.0.0.1:9091"\n'
                    '[handler]\nmax_failed_ratio = 0.5\n')
    done, _ = command("config", "--config", str(conf), "--set", "metrics.pushgateway_url=",
                      "--set", "handler.max_failed_ratio=")
    assert done.returncode == 0, done.stderr
    printed = json.loads(done.stdout.strip().splitlines()[-1])
    assert printed["metrics"]["pushgateway_url"] is None
    assert printed["handler"]["max_failed_ratio"] is None
    assert printed["streams"]["keys"] == ["orders"]  # the rest of the file stands
    done, _ = command("config", "--config", str(conf))
    assert json.loads(done.stdout)["metrics"]["pushgateway_url"] == "http://127.0.0.1:9091"


@pytest.mark.parametrize(("override", "default"), [("claim.min_idle_ms=", "60000"),
                                                   ("dead_letter.suffix=", '":dlq"')])
def test_an_empty_set_of_a_setting_that_needs_a_value_is_refused(override: str, default: str):
    done, _ = command("run", "--set", "streams.keys=orders", "--set", override)
    refused_here(done, 2, f"an empty --set value unsets only an optional setting (default "
                          f"none), and this one needs a value (default {default}): give one")


def test_an_empty_set_keeps_its_meaning_where_empty_is_a_value():
    """``claim.journal_prefix=`` is "no journal" (docs/ACL.md), not "back to the default"."""
    done, _ = command("config", "--set", "streams.keys=orders", "--set", "claim.journal_prefix=")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["claim"]["journal_prefix"] == ""


@pytest.mark.slow
def test_a_refusal_before_spark_pushes_the_attempt_as_the_job_would(tmp_path: Path):
    """Issue 61 part 2's contract survives the early door: a refused run (exit 2) pushes its
    attempt; the ``apply`` of a missing plan under its own kind."""
    with LocalPushgateway() as gateway:
        base = ["--set", "streams.keys=orders", "--set", f"redis.url={CLOSED_URL}",
                "--set", f"metrics.pushgateway_url={gateway.url}"]
        done, _ = command("run", *base, "--set", "handler.path=no_such_module_61:handle")
        refused_here(done, 2, "no_such_module_61")
        assert pushed(gateway, PREFIX + "last_attempt_exit_code") == {"outcome=attempt": 2}
        done, _ = command("apply", str(tmp_path / "nonexistent"), *base,
                          "--set", "handler.path=recovery.handlers:example_handler",
                          "--set", f"report.path={tmp_path / 'reports'}")
        refused_here(done, 2, "no such directory")
        assert pushed(gateway, PREFIX + "last_attempt_exit_code", "recover_apply") == {
            "outcome=attempt": 2}


@pytest.mark.parametrize(("spark_args", "elsewhere"), [
    (["--deploy-mode", "cluster"], True),
    (["--deploy-mode=cluster"], True),
    (["--conf", "spark.submit.deployMode=cluster"], True),
    (["--deploy-mode", "client"], False),
    (["--deploy-mode", "cluster", "--deploy-mode", "client"], False),  # the last one counts
])
def test_the_driver_is_elsewhere_only_in_cluster_deploy_mode(spark_args, elsewhere):
    """Where the driver is not this process, the checks here cannot stand for its own."""
    assert driver_elsewhere(spark_args) is elsewhere


def test_the_options_the_job_answers_itself_are_read_as_argparse_reads_them():
    assert answered_by_the_job("--print-conf") and answered_by_the_job("-h")
    assert not answered_by_the_job("--p") and not answered_by_the_job("--config")
