"""The three jobs' command lines (the steps they share in recovery.jobs.job_command and
recovery.jobs.job_options; the job classes recovery.jobs.recover, recovery.jobs.redrive,
recovery.jobs.dead_letters) as a scheduler and a new user meet them: ``--version``,
``--print-config`` (secrets masked, nothing contacted), errors that name where a bad value
came from, ``exit_code`` in every JSON summary, the checks made once, the command's names
kept for compatibility (recovery.jobs.submit), and conf/recovery.toml naming every
setting."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
from collections import Counter
from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from redis import Redis

from recovery import __version__
from recovery.settings.model import Settings
from recovery.settings.model import section_fields as fields_of
from recovery.testing.backlog import add_entries, create_group, deliver, make_stuck
from recovery.testing.local_redis import LocalServer
from tests.support.fault_tools import (
    GROUP,
    ROOT,
    finished,
    job_args,
    run_in_process,
    spark_info_lines,
    spark_submit,
)
from tests.support.invariants import pel

JOBS = {"recover": "jobs/recover.py", "redrive": "jobs/redrive.py",
        "dead_letters": "jobs/dead_letters.py"}
SECRET = "hunter2-not-in-any-output"
CLOSED_URL = "redis://127.0.0.1:1/0"  # nothing listens: a job that contacted Redis would fail


def job(script: str, *args: str, env: dict[str, str] | None = None
        ) -> subprocess.CompletedProcess[str]:
    """`script` (a jobs/ file) run by this interpreter, as a user would before spark-submit
    (the options below stop before Spark starts)."""
    return subprocess.run([sys.executable, script, *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, env={**os.environ, **(env or {})})


def stuck(client: Redis, stream: str) -> None:
    """Three entries of `stream`, delivered once to a consumer gone an hour ago."""
    create_group(client, stream, GROUP)
    ids = add_entries(client, stream, 3, lambda i: {"n": str(i)})
    deliver(client, stream, GROUP, "dead", len(ids))
    make_stuck(client, stream, GROUP, "dead", ids, idle_ms=3_600_000)
    assert len(pel(client, stream, GROUP)) == 3


def section_fields() -> dict[str, list[str]]:
    """Every settings section with its fields, from the model itself."""
    return {name: list(fields_of(name)) for name in Settings.model_fields}


def test_the_config_file_names_every_setting() -> None:
    """conf/recovery.toml documents each field under its section, set or commented out."""
    text = (ROOT / "conf" / "recovery.toml").read_text(encoding="utf-8")
    tomllib.loads(text)  # and it is valid TOML as shipped
    current, named = None, set()
    for line in text.splitlines():
        if heading := re.match(r"^#?\s*\[(\w+)\]\s*$", line):
            current = heading[1]
        elif (key := re.match(r"^#?\s*(\w+)\s*=", line)) and current is not None:
            named.add((current, key[1]))
    missing = [f"{section}.{field}" for section, fields in section_fields().items()
               for field in fields if (section, field) not in named]
    assert missing == []


@pytest.mark.parametrize("name", JOBS)
def test_version(name: str) -> None:
    done = job(JOBS[name], "--version")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"{name} {__version__}"


@pytest.mark.parametrize("module", ["recovery", "recovery.jobs.submit"])
def test_the_command_answers_under_each_of_its_names(module: str) -> None:
    """``python -m recovery`` and the older ``python -m recovery.jobs.submit`` are the same
    command (recovery.cli.main)."""
    done = subprocess.run([sys.executable, "-m", module, "--version"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stdout.strip()) == (0, f"redis-stream-recovery {__version__}")


@pytest.mark.parametrize("name", JOBS)
def test_print_config_masks_secrets_and_touches_nothing(name: str) -> None:
    """The effective settings as one JSON line, the file, environment and --set merged; the
    password (from the environment, and one in the URL) never printed; Redis never asked."""
    config = ROOT / "conf" / "recovery.toml"
    done = job(JOBS[name], "--config", str(config), "--print-config",
               "--set", f"redis.url=redis://ops:{SECRET}x@127.0.0.1:1/0",
               "--set", "claim.count=777",
               env={"RECOVERY_REDIS__PASSWORD": SECRET, "RECOVERY_SPARK__PARTITIONS": "7"})
    assert done.returncode == 0, done.stderr
    assert SECRET not in done.stdout + done.stderr
    printed = json.loads(done.stdout.strip().splitlines()[-1])
    assert printed["claim"]["count"] == 777                     # --set
    assert printed["spark"]["partitions"] == 7                  # the environment
    assert printed["dead_letter"]["suffix"] == ":dlq"           # the file
    assert printed["claim"]["min_idle_ms"] == 60_000            # a default
    assert printed["redis"]["password"] == "**********"
    assert printed["redis"]["url"] == "redis://127.0.0.1:1/0"
    assert printed["redis"]["username"] == "ops"


@pytest.mark.slow
def test_a_bad_value_names_the_variable_it_came_from() -> None:
    env = {"RECOVERY_CLAIM__MIN_IDLE_MS": "soon"}
    done = job(JOBS["recover"], "--set", "streams.keys=a", "--set", f"redis.url={CLOSED_URL}",
               env=env)
    assert done.returncode == 2
    assert "claim.min_idle_ms" in done.stderr
    assert "(from RECOVERY_CLAIM__MIN_IDLE_MS)" in done.stderr
    done = job(JOBS["recover"], "--set", "streams.keys=a", "--set", "claim.count=many")
    assert done.returncode == 2
    assert "claim.count" in done.stderr and "(from --set)" in done.stderr
    assert json.loads(done.stdout.splitlines()[-1])["exit_code"] == 2


@pytest.mark.slow
def test_a_run_that_succeeds_says_exit_code_0(spark: SparkSession, redis_server: LocalServer,
                                              tmp_path: Path) -> None:
    """Every JSON summary carries the exit code, not only the failures', and the
    scheduler's run id in full when one is given; so does every row of the Parquet report
    and health files, read back as a user reads every run at once (a dry run's report is
    written by Spark's writer, the run's by the Python workers)."""
    client = redis_server.client()
    stuck(client, "cli-ok")
    args = job_args(redis_server.url, tmp_path, ["cli-ok"],
                    "handler.path=recovery.handlers:example_handler")
    planned_by = "manual__2026-12-02T02:09:20.000001+00:00"
    dry = run_in_process(spark, [*args, "--dry-run", "--scheduler-run-id", planned_by])
    assert dry.code == 0, dry.stderr
    airflow_run_id = "manual__2026-12-02T02:09:23.395718+00:00"
    result = run_in_process(spark, [*args, "--scheduler-run-id", airflow_run_id])
    assert result.code == 0, result.stderr
    assert result.summary["scheduler_run_id"] == airflow_run_id
    assert airflow_run_id not in result.summary["run_id"]
    assert result.summary["exit_code"] == 0
    assert result.summary["status"] == "ok"
    assert result.summary["totals"]["reprocessed"] == 3
    assert pel(client, "cli-ok", GROUP) == {}  # the run really recovered them
    runs = {dry.summary["run_id"]: planned_by, result.summary["run_id"]: airflow_run_id}
    for files in ("entries", "health"):
        rows = spark.read.parquet(str(tmp_path / files)).collect()
        assert Counter((r.run_id, r.scheduler_run_id) for r in rows) == \
            {pair: 3 if files == "entries" else 1 for pair in runs.items()}, files


@pytest.mark.slow
def test_the_checks_before_a_run_are_made_once(spark: SparkSession, redis_server: LocalServer,
                                               tmp_path: Path, caplog) -> None:
    """The command line checked the server (PING, INFO) and the handler before the session,
    and the run checked them again: now once. Redis counts the PINGs; a dry run in handler
    mode without a handler still warns, once."""
    client = redis_server.client()
    stuck(client, "cli-once")
    pings = int(client.info("commandstats").get("cmdstat_ping", {}).get("calls", 0))
    result = run_in_process(spark, [*job_args(redis_server.url, tmp_path, ["cli-once"],
                                             "handler.path="),
                                    "--dry-run"])
    assert result.code == 0, result.stderr
    assert result.summary["totals"]["would_reprocess"] == 3
    assert int(client.info("commandstats")["cmdstat_ping"]["calls"]) - pings == 1
    warned = [r for r in caplog.records if "handler.path is not set" in r.getMessage()]
    assert len(warned) == 1, [r.getMessage() for r in warned]


@pytest.mark.parametrize("given", ["", "x" * 251, "run\nid"])
def test_a_scheduler_run_id_that_is_no_run_id_is_refused_before_redis(given: str,
                                                                     tmp_path: Path) -> None:
    result = run_in_process(None, [*job_args(CLOSED_URL, tmp_path, ["orders"]),
                                   "--scheduler-run-id", given])
    assert result.code == 2, result.stderr
    assert "a scheduler run id is 1 to 250 printable characters" in result.stderr


@pytest.mark.slow
def test_spark_submit_logs_spark_s_info_when_asked(redis_server: LocalServer,
                                                    tmp_path: Path) -> None:
    """A submitter's ``spark.log.level=INFO`` wins over the job's quiet default: Spark's INFO
    lines appear, and the job's own INFO lines and JSON line stay. The quiet default itself
    (Spark at WARN under spark-submit, its INFO lines would bury the job's own) is asserted
    on the run of tests/integration/test_backoff.py's
    ``test_a_scheduled_run_through_spark_submit``, a spark-submit without the setting."""
    stuck(redis_server.client(), "quiet")
    args = [*job_args(redis_server.url, tmp_path / "reports", ["quiet"]), "--dry-run"]
    logs = tmp_path / "logs"
    result = finished(spark_submit(args, logs, "spark.log.level=INFO"), logs, timeout_s=180)
    assert result.code == 0, result.stderr
    assert result.summary["exit_code"] == 0
    assert "INFO recovery.driver.job: run " in result.stderr
    assert spark_info_lines(result.stderr) > 20, spark_info_lines(result.stderr)
