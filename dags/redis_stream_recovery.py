"""Example Airflow DAGs for the installed ``redis-stream-recovery`` command (Airflow 3.3,
providers-standard for the approval step; no Spark provider needed):

- ``redis_stream_recovery``: ``run`` every 15 minutes (one retry; a deadline alert);
- ``redis_stream_reviewed_recovery``: ``dry-run``, an approval (Airflow's human-in-the-loop
  ApprovalOperator, showing the dry run's totals), then ``apply <that dry run's report_path>``:
  exactly the plan that was approved;
- ``redis_stream_dry_run`` and ``redis_stream_apply_plan``: the same two steps as separate
  DAGs triggered by hand, ``apply_plan`` with the param ``plan`` (a dry run's report_path);
- ``redis_stream_redrive``: ``redrive``, triggered by hand (params ``dry_run``, default true,
  ``reasons`` and ``groups``);
- ``redis_stream_dead_letters``: ``dead-letters`` (the dead-letter views) once a day.

Every task runs the command as a subprocess (:func:`run_job`): its output goes to the task log,
a non-zero exit (2 bad config or arguments, 1 anything else) fails the task, and the job's
JSON summary (the last JSON line of its stdout) is the task's return value, so it lands in
XCom (``return_value``). The driver's stdout reaches the command's output in client deploy
mode and with local masters; in YARN or Kubernetes cluster mode it stays in the driver's log
and XCom gets None.

The job's ``--run-id`` is a short form of Airflow's: ``<run_after %Y%m%dT%H%M%SZ>-<task
id>-<try number>-<first 8 hex digits of the SHA-256 of "<dag_id>/<Airflow run_id>">``
(:func:`job_run_id`,
e.g. ``20261202T020923Z-dry_run-1-5f0c1a9e``): the same on the worker, in Redis (``x-run-id``,
the job's consumer names, its registration and journals) and in the report paths, new for
each try (a retry never reuses a killed try's claim journal), starting with the time the
dead-letter trend reads. The full Airflow run_id goes with it (``--scheduler-run-id``): the
job's JSON summary, the task's XCom, and every row of its Parquet report and health files
have it as ``scheduler_run_id``. Two Airflow runs whose short forms meet (one second, one
task, one try, one hash prefix) cannot share a run (the DAG
id is hashed with the run id: two DAGs on one schedule, say copies of this file for two
configs, have the same ``scheduled__...`` run id, run_after and task ids): the
job registers each run id once (SET NX) and refuses the second (exit 2; a retry gets a new
one).

On the worker: ``redis-stream-recovery`` (the Variable ``recovery_command``, default the one on
PATH); the config file (Variable ``recovery_config``, default
``<recovery_app_dir>/conf/recovery.toml``, ``recovery_app_dir`` defaulting to
``/opt/redis-stream-recovery``); the Spark master (host and port), ``deploy-mode`` and
``queue`` (extra) from the ``spark_default`` connection when it is defined, SPARK_OPTIONS below
for the rest; without that connection spark-submit's own default master (``local[*]``, or
``spark.master`` of its ``spark-defaults.conf``) runs the job. The
Redis password (and user, its login) from the ``redis_recovery`` connection, given to the job
as RECOVERY_REDIS__PASSWORD (RECOVERY_REDIS__USERNAME) in its environment only: never on a
command line, in the TOML file or a log. Without that connection the job reads its password
as it would by hand (``redis.password_file``, the worker's environment).

Alerts: fill FAILURE_NOTIFIERS and DEADLINE_CALLBACK below.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import signal
import subprocess
from datetime import datetime, timedelta
from typing import Any

from airflow.providers.standard.operators.hitl import ApprovalOperator
from airflow.sdk import (
    DAG,
    AsyncCallback,
    BaseNotifier,
    Connection,
    DeadlineAlert,
    DeadlineReference,
    Param,
    Variable,
    get_current_context,
    task,
)
from airflow.sdk.exceptions import AirflowException, AirflowNotFoundException

log = logging.getLogger(__name__)

# --- Alerts: fill these ------------------------------------------------------------------
# Told when a task fails for good (after its retries): notifier instances, called with the
# task's context, e.g. SlackNotifier(slack_conn_id="slack", channel="#ops",
# text="{{ dag.dag_id }}.{{ ti.task_id }} failed: {{ exception }}"). Read at failure time.
FAILURE_NOTIFIERS: list[BaseNotifier] = []
# Run by the triggerer when a scheduled run is not done DEADLINES[dag_id] after it was queued:
# a notifier class with async_notify (or an importable async function) and its arguments, e.g.
# AsyncCallback(SlackWebhookNotifier, kwargs={"text": "{{ dag_run.dag_id }} missed its
# deadline"}). Unset, the scheduled DAGs carry no deadline alert.
DEADLINE_CALLBACK: AsyncCallback | None = None
DEADLINES = {"redis_stream_recovery": timedelta(minutes=30),  # two schedule intervals
             "redis_stream_dead_letters": timedelta(hours=2)}
# spark-submit options every run gets after the connection's, e.g. ["--conf", "k=v"].
SPARK_OPTIONS: list[str] = []
# ------------------------------------------------------------------------------------------

REDIS_CONN_ID = "redis_recovery"
SPARK_CONN_ID = "spark_default"
CONFIG = ("{{ var.value.get('recovery_config', var.value.get('recovery_app_dir', "
          "'/opt/redis-stream-recovery') ~ '/conf/recovery.toml') }}")
JOB_TIMEOUT = timedelta(hours=1)
STOP_GRACE_S = 30  # SIGTERM to SIGKILL when a task is stopped (timeout, marked failed)


def notify_failure(context: Any) -> None:
    """Every task's on_failure_callback: each of FAILURE_NOTIFIERS with the task's context."""
    for notifier in FAILURE_NOTIFIERS:
        notifier(context)


def job_run_id(dag_id: str, airflow_run_id: str, run_after: datetime, task_id: str,
               try_number: int) -> str:
    """The job's ``--run-id`` for one try of one task of an Airflow run: short, and traceable
    to the Airflow run by its time, task, try and the hash of its DAG and run ids (Airflow's
    run ids are unique per DAG only; module docstring)."""
    digest = hashlib.sha256(f"{dag_id}/{airflow_run_id}".encode()).hexdigest()[:8]
    task = re.sub(r"[^A-Za-z0-9._]+", "-", task_id).strip("-")
    return f"{run_after:%Y%m%dT%H%M%SZ}-{task}-{try_number}-{digest}"


def spark_options(conn_id: str = SPARK_CONN_ID) -> list[str]:
    """spark-submit options from the Spark connection: ``--master`` (host, with the port when
    set), ``--deploy-mode`` and ``--queue`` (extra), then SPARK_OPTIONS. Without the
    connection, SPARK_OPTIONS only: spark-submit's default master (local)."""
    try:
        conn = Connection.get(conn_id)
    except AirflowNotFoundException:
        log.info("no Airflow connection %r: spark-submit's default master runs the job",
                 conn_id)
        return list(SPARK_OPTIONS)
    master = f"{conn.host}:{conn.port}" if conn.port else str(conn.host)
    extra = conn.extra_dejson
    options = ["--master", master]
    for key in ("deploy-mode", "queue"):
        if extra.get(key):
            options += [f"--{key}", str(extra[key])]
    return [*options, *SPARK_OPTIONS]


def redis_secrets(conn_id: str = REDIS_CONN_ID) -> dict[str, str]:
    """The job's environment variables for the Redis login of the connection `conn_id`:
    RECOVERY_REDIS__PASSWORD (its password) and RECOVERY_REDIS__USERNAME (its login), each
    when set; none without the connection."""
    try:
        conn = Connection.get(conn_id)
    except AirflowNotFoundException:
        log.info("no Airflow connection %r: the job reads its Redis password from its config "
                 "or environment", conn_id)
        return {}
    secrets = {"RECOVERY_REDIS__PASSWORD": conn.password, "RECOVERY_REDIS__USERNAME": conn.login}
    return {name: value for name, value in secrets.items() if value}


def run_job(command: list[str], env: dict[str, str]) -> dict[str, Any] | None:
    """Run `command`, each output line (stdout and stderr) to the task log. Returns the last
    stdout line that is a JSON object (the job's summary); raises on a non-zero exit. A task
    stopped meanwhile (execution_timeout, marked failed) stops the job's process group."""
    log.info("running %s", " ".join(command))  # no secret: those are in `env` only
    summary = None
    with subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, start_new_session=True) as job:
        try:
            for line in job.stdout or ():
                log.info("%s", line.rstrip())
                text = line.strip()
                if text.startswith("{") and text.endswith("}"):
                    with contextlib.suppress(ValueError):  # a log line that looks like one
                        summary = json.loads(text)
            code = job.wait()
        finally:
            _stop(job)
    if code != 0:
        raise AirflowException(f"{command[1]} exited with code {code} (2: bad config or "
                               "arguments, 1: anything else); its error is in the log above")
    return summary


def _stop(job: subprocess.Popen[str]) -> None:
    """Stop `job` and its children (spark-submit, the JVM, the Python driver) if running."""
    if job.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(job.pid, signal.SIGTERM)
        try:
            job.wait(STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            os.killpg(job.pid, signal.SIGKILL)


@task(execution_timeout=JOB_TIMEOUT)
def recovery_job(command: str, args: list[str], config: str) -> dict[str, Any] | None:
    """``redis-stream-recovery <command> <args> --config <config> --run-id <job_run_id>
    --scheduler-run-id <Airflow run_id> -- <spark options>``; returns the job's JSON
    summary."""
    context = get_current_context()
    ti, dag_run = context["ti"], context["dag_run"]
    run_id = job_run_id(dag_run.dag_id, dag_run.run_id, dag_run.run_after, ti.task_id,
                        ti.try_number)
    executable = Variable.get("recovery_command", default="redis-stream-recovery")
    name = f"redis-stream-{ti.task_id.replace('_', '-')}"
    argv = [executable, command, *kept_filters(args), "--config", config, "--run-id", run_id,
            "--scheduler-run-id", dag_run.run_id, "--", *spark_options(), "--name", name]
    return run_job(argv, {**os.environ, **redis_secrets()})


def kept_filters(args: list[str]) -> list[str]:
    """`args` without the ``--set key=`` pairs of form fields left empty: an empty field
    means "as the config file says" (an empty ``--set`` would unset the file's filter)."""
    kept: list[str] = []
    for arg in args:
        if kept and kept[-1] == "--set" and arg.endswith("="):
            kept.pop()
            continue
        kept.append(arg)
    return kept


@task.short_circuit(execution_timeout=timedelta(minutes=5))
def has_plan(summary: dict[str, Any] | None) -> bool:
    """Whether the dry run found pending entries (a report_path): no plan, nothing to approve."""
    return bool(summary and summary.get("report_path"))


SCHEDULED: dict[str, Any] = {  # one run at a time: a late run is skipped, not stacked
    "start_date": datetime(2026, 1, 1),
    "catchup": False,
    "max_active_runs": 1,
    "tags": ["redis", "spark"],
    "default_args": {"on_failure_callback": notify_failure},
}
BY_HAND: dict[str, Any] = {**SCHEDULED, "schedule": None}  # triggered by an operator
NO_RETRY = {"retries": 0}  # a refusal (exit 2) stays one; re-triggering by hand is safe


def deadline(dag_id: str) -> DeadlineAlert | None:
    """The deadline alert of a scheduled DAG: DEADLINE_CALLBACK when a run is not done
    DEADLINES[dag_id] after it was queued; none while DEADLINE_CALLBACK is unset."""
    if DEADLINE_CALLBACK is None:
        return None
    return DeadlineAlert(reference=DeadlineReference.DAGRUN_QUEUED_AT,
                         interval=DEADLINES[dag_id], callback=DEADLINE_CALLBACK)


with DAG(
    dag_id="redis_stream_recovery",
    description="Claim, re-process and dead-letter stuck Redis Streams entries",
    schedule=timedelta(minutes=15),
    deadline=deadline("redis_stream_recovery"),
    **{**SCHEDULED, "default_args": {**SCHEDULED["default_args"], "retries": 1,
                                     "retry_delay": timedelta(minutes=2)}},
) as recovery_dag:
    recovery_job.override(task_id="recover")("run", [], CONFIG)

with DAG(
    dag_id="redis_stream_reviewed_recovery",
    description="Dry run, approval of its plan by a person, then exactly that plan applied",
    **BY_HAND,  # one at a time: two applies of one plan would race for the same entries
) as reviewed_dag:
    planned = recovery_job.override(task_id="dry_run", **NO_RETRY)("dry-run", [], CONFIG)
    approval = ApprovalOperator(
        task_id="approve",
        subject="Apply the Redis Streams recovery plan?",
        body=("The dry run would do (by action): "
              "{{ ti.xcom_pull(task_ids='dry_run')['totals'] | tojson }}. Its report: "
              "{{ ti.xcom_pull(task_ids='dry_run')['report_path'] }}. Approve within "
              "plan.max_age_s of the dry run (1 h by default); Reject skips the apply."),
        defaults="Reject",  # taken when nobody answers within response_timeout
        response_timeout=timedelta(hours=1),
        execution_timeout=timedelta(minutes=5),  # the time to ask, not the wait for an answer
    )
    applied = recovery_job.override(task_id="apply_plan", **NO_RETRY)(
        "apply", ["{{ ti.xcom_pull(task_ids='dry_run')['report_path'] }}"], CONFIG)
    has_plan(planned) >> approval >> applied

with DAG(
    dag_id="redis_stream_dry_run",
    description="Dry run of the recovery: report what it would do; its report_path is a plan",
    **BY_HAND,
) as dry_run_dag:
    recovery_job.override(task_id="dry_run", **NO_RETRY)("dry-run", [], CONFIG)

with DAG(
    dag_id="redis_stream_apply_plan",
    description="Apply a reviewed dry run's plan exactly (trigger by hand with its report_path)",
    params={
        # No default: a trigger without a plan is refused before any task runs.
        "plan": Param(type="string", minLength=1, pattern=r"\S",
                      description="the dry run's report directory on the worker: its XCom "
                                  "summary's report_path (<report.path>/entries/run_id=<id>)"),
    },
    **BY_HAND,
) as apply_plan_dag:
    recovery_job.override(task_id="apply_plan", **NO_RETRY)(
        "apply", ["{{ params.plan }}"], CONFIG)

with DAG(
    dag_id="redis_stream_redrive",
    description="Move dead letters back to their source streams (trigger by hand)",
    params={
        "dry_run": Param(True, type="boolean", description="count only; change nothing"),
        "reasons": Param("", type="string",
                         description="x-death-reason list, comma separated; empty: as the "
                                     "config file says"),
        "groups": Param("", type="string",
                        description="x-original-group list, comma separated; empty: as the "
                                    "config file says"),
    },
    **BY_HAND,
) as redrive_dag:
    recovery_job.override(task_id="redrive", **NO_RETRY)("redrive", [
        "--set", "redrive.dry_run={{ params.dry_run | lower }}",
        "--set", "redrive.reasons={{ params.reasons }}",
        "--set", "redrive.groups={{ params.groups }}",
    ], CONFIG)

with DAG(
    dag_id="redis_stream_dead_letters",
    description="Dead-letter views (by reason, signature, age; the health trend): read only",
    schedule="@daily",
    deadline=deadline("redis_stream_dead_letters"),
    **SCHEDULED,
) as dead_letters_dag:
    recovery_job.override(task_id="dead_letters", retries=1,
                          retry_delay=timedelta(minutes=5))("dead-letters", [], CONFIG)
