"""Example Airflow DAGs: recover stuck Redis Streams messages every 15 minutes, and redrive
dead letters on demand. All run the package's spark-submit entry points.

A reviewed recovery, by hand, in two DAGs (the scheduled one stays as it was):

- ``redis_stream_dry_run``: ``jobs/recover.py --dry-run``; changes nothing in Redis. Its XCom
  summary's ``report_path`` is the plan: the dry run's report directory on the worker
  (``<report.path>/entries/run_id=<id>``; null when nothing was pending). Review it.
- ``redis_stream_apply_plan``: ``jobs/recover.py --plan {{ params.plan }}`` with the required
  param ``plan`` (that ``report_path``): does exactly what the dry run reported. A plan the
  job refuses (a real run's report, too old, another server, missing) fails the task with
  exit 2 and Redis untouched. No retries: re-triggering with the same plan is safe (what was
  done is reported ``skipped``), and a refusal would only be refused again.

- A non-zero exit of the job (2 bad config, 1 anything else) fails the task: the Spark
  provider raises on any non-zero spark-submit exit code.
- The job's JSON summary (the last JSON line of its stdout) is the task's return value, so it
  lands in XCom (``return_value``). The driver's stdout reaches spark-submit's output in
  ``client`` deploy mode and with ``local`` masters; in YARN cluster mode it stays in the
  driver's container log and XCom gets None.

Airflow Variables (or AIRFLOW_VAR_... environment variables) say where things are on the
worker: ``recovery_app_dir`` (a checkout or unpacked release holding ``jobs/``, default
``/opt/redis-stream-recovery``) and ``recovery_config`` (the TOML file, default
``<app dir>/conf/recovery.toml``). The Spark master comes from the ``spark_default``
connection. Secrets: set RECOVERY_REDIS__PASSWORD in ``env_vars`` from a secrets backend,
never in the TOML file. Tested with Airflow 3.3 and apache-airflow-providers-apache-spark 6.3.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import DAG, Param

APP_DIR = "{{ var.value.get('recovery_app_dir', '/opt/redis-stream-recovery') }}"
CONFIG = ("{{ var.value.get('recovery_config', var.value.get('recovery_app_dir', "
          "'/opt/redis-stream-recovery') ~ '/conf/recovery.toml') }}")


class _SummaryHook(SparkSubmitHook):
    """Remembers the last line of spark-submit's output that is a JSON object."""

    summary: dict[str, Any] | None = None

    def _process_spark_submit_log(self, itr: Iterator[Any]) -> None:
        super()._process_spark_submit_log(self._watch(itr))

    def _watch(self, itr: Iterator[Any]) -> Iterator[Any]:
        for line in itr:
            text = line.strip()
            if text.startswith("{") and text.endswith("}"):
                with contextlib.suppress(ValueError):  # a log line that merely looks like one
                    self.summary = json.loads(text)
            yield line


class RecoverySubmitOperator(SparkSubmitOperator):
    """SparkSubmitOperator that returns the job's JSON summary (pushed to XCom)."""

    def _get_hook(self) -> SparkSubmitHook:
        hook = super()._get_hook()
        # The same object with one method overridden: the provider builds its hook from ~30
        # operator arguments that we would otherwise have to repeat.
        hook.__class__ = _SummaryHook
        return hook

    def execute(self, context: Any) -> dict[str, Any] | None:
        super().execute(context)
        hook = self._hook
        return hook.summary if isinstance(hook, _SummaryHook) else None


BY_HAND: dict[str, Any] = {  # the DAGs an operator triggers: one run at a time, no schedule
    "schedule": None,
    "start_date": datetime(2026, 1, 1),
    "catchup": False,
    "max_active_runs": 1,
    "tags": ["redis", "spark"],
}


def submit(task_id: str, job: str, args: list[str], name: str | None = None,
           **operator: Any) -> RecoverySubmitOperator:
    """The task of a DAG: spark-submit of ``jobs/<job>.py --config <CONFIG> <args>`` on the
    ``spark_default`` connection, named `name` (default ``redis-stream-<task id>``)."""
    return RecoverySubmitOperator(
        task_id=task_id, application=f"{APP_DIR}/jobs/{job}.py",
        application_args=["--config", CONFIG, *args],
        name=name or f"redis-stream-{task_id.replace('_', '-')}", conn_id="spark_default",
        **operator)


with DAG(
    dag_id="redis_stream_recovery",
    description="Claim, re-process and dead-letter stuck Redis Streams entries",
    schedule=timedelta(minutes=15),
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,  # one recovery at a time; a late run is skipped, not stacked
    default_args={"retries": 1, "retry_delay": timedelta(minutes=2)},
    tags=["redis", "spark"],
) as recovery_dag:
    submit("recover", "recover", [], name="redis-stream-recovery",
           execution_timeout=timedelta(hours=1))

with DAG(
    dag_id="redis_stream_redrive",
    description="Move dead letters back to their source streams (trigger by hand)",
    params={
        "dry_run": Param(True, type="boolean", description="count only; change nothing"),
        "reasons": Param("", type="string", description="x-death-reason list, comma separated"),
        "groups": Param("", type="string", description="x-original-group list, comma separated"),
    },
    **BY_HAND,
) as redrive_dag:
    submit("redrive", "redrive", [
        "--set", "redrive.dry_run={{ params.dry_run | lower }}",
        "--set", "redrive.reasons={{ params.reasons }}",
        "--set", "redrive.groups={{ params.groups }}",
    ], retries=0)

with DAG(
    dag_id="redis_stream_dry_run",
    description="Dry run of the recovery: report what it would do; its report_path is a plan",
    **BY_HAND,
) as dry_run_dag:
    submit("dry_run", "recover", ["--dry-run"], retries=0,
           execution_timeout=timedelta(hours=1))

with DAG(
    dag_id="redis_stream_apply_plan",
    description="Apply a reviewed dry run's plan exactly (trigger by hand with its report_path)",
    params={
        # No default: a trigger without a plan is refused before any task runs.
        "plan": Param(type="string", minLength=1, pattern=r"\S",
                      description="the dry run's report directory on the worker: its XCom "
                                  "summary's report_path (<report.path>/entries/run_id=<id>)"),
    },
    **BY_HAND,  # one at a time: two applies of one plan would race for the same entries
) as apply_plan_dag:
    # retries=0: a refused plan (exit 2) stays refused; re-trigger by hand, it is safe
    submit("apply_plan", "recover", ["--plan", "{{ params.plan }}"], retries=0,
           execution_timeout=timedelta(hours=1))
