"""Airflow, driven from the project's tests: Airflow lives in its own venv (AIRFLOW_PYTHON), so
each step is a script run with that interpreter, printing one ``RESULT <json>`` line.

- RUNNER parses the DAG folder and runs the DAGs asked, one after the other in the same
  process (an Airflow start and parse costs seconds), each with ``dag.test()``; with
  NOTIFY_FILE set it first adds a FileNotifier (tests/support/airflow_notifier.py) to the DAG
  file's FAILURE_NOTIFIERS, as a user fills that hook.
- APPROVER answers (or only waits for) a human-in-the-loop task through Airflow's REST API
  (the api-server's own app, in process: ``PATCH .../taskInstances/<task>/-1/hitlDetails``).
- DEADLINE parses a copy of the DAG file whose DEADLINE_CALLBACK is filled, and runs the
  serialised deadline callback with Airflow's CallbackTrigger, as the triggerer does.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
AIRFLOW_PYTHON = os.environ.get("AIRFLOW_PYTHON")

RUNNER = """
import json, os, sys
sys.path.insert(0, sys.argv[2])  # the checkout: tests.support.airflow_notifier
from airflow.dag_processing.dagbag import DagBag
bag = DagBag(dag_folder=sys.argv[1])
result = {"errors": {k: str(v) for k, v in bag.import_errors.items()},
          "tasks": {d: {t.task_id: type(t).__name__ for t in dag.tasks}
                    for d, dag in bag.dags.items()},
          "timeouts": {d: {t.task_id: t.execution_timeout and t.execution_timeout.total_seconds()
                           for t in dag.tasks} for d, dag in bag.dags.items()},
          "runs": []}
hooked = set()
for asked in json.loads(sys.argv[3]) if len(sys.argv) > 3 else []:
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session
    dag = bag.dags[asked["dag_id"]]
    if os.environ.get("NOTIFY_FILE") and dag.dag_id not in hooked:
        from tests.support.airflow_notifier import FileNotifier
        hook = dag.tasks[0].on_failure_callback
        hook = hook[0] if isinstance(hook, list) else hook
        hook.__globals__["FAILURE_NOTIFIERS"].append(FileNotifier(os.environ["NOTIFY_FILE"]))
        hooked.add(dag.dag_id)
    variables = {"AIRFLOW_VAR_" + k.upper(): v for k, v in asked["variables"].items()}
    os.environ.update(variables)  # this run's Airflow Variables, read as the tasks run
    done = {}
    try:
        run = dag.test(run_conf=asked["conf"])
    except Exception as exc:
        done.update(state="not started", error=f"{type(exc).__name__}: {exc}")
    else:
        with create_session() as session:
            rows = session.query(XComModel).filter_by(dag_id=run.dag_id, run_id=run.run_id,
                                                      key="return_value").all()
            tis = run.get_task_instances(session=session)
            done.update(state=str(run.state), run_id=run.run_id, dag_id=run.dag_id,
                        run_after=run.run_after.strftime("%Y%m%dT%H%M%SZ"),
                        xcom={r.task_id: r.value for r in rows},
                        task_states={ti.task_id: str(ti.state) for ti in tis})
    for name in variables:
        del os.environ[name]
    result["runs"].append(done)
print("RESULT " + json.dumps(result))
"""

APPROVER = """
import json, sys, time
from fastapi.testclient import TestClient
from airflow.api_fastapi.app import create_app
dag_id, task_id, answer = sys.argv[1:4]
api = TestClient(create_app("core"))
deadline = time.monotonic() + 240
while True:
    got = api.get(f"/api/v2/dags/{dag_id}/dagRuns/~/hitlDetails")
    details = [d for d in got.json().get("hitl_details", [])
               if d["task_instance"]["task_id"] == task_id and not d["response_received"]]
    if details or time.monotonic() > deadline:
        break
    time.sleep(1)
result = {"asked": details}
if details and answer != "-":
    ti = details[0]["task_instance"]
    done = api.patch(f"/api/v2/dags/{dag_id}/dagRuns/{ti['dag_run_id']}/taskInstances/"
                     f"{task_id}/-1/hitlDetails", json={"chosen_options": [answer]})
    result["answer"] = {"status": done.status_code, "body": done.json()}
print("RESULT " + json.dumps(result))
"""

DEADLINE = """
import asyncio, json, sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])  # the checkout: tests.support.airflow_notifier
dag_file, folder, notify_file = Path(sys.argv[2]), Path(sys.argv[3]), sys.argv[4]
hook = "DEADLINE_CALLBACK: AsyncCallback | None = None"
text = dag_file.read_text()
assert hook in text, "the documented hook line is gone"
(folder / dag_file.name).write_text(text.replace(hook, (
    "from tests.support.airflow_notifier import FileNotifier\\n"
    f"DEADLINE_CALLBACK = AsyncCallback(FileNotifier, kwargs={{'path': {notify_file!r}}})")))
from airflow.dag_processing.dagbag import DagBag
from airflow.serialization.serialized_objects import DagSerialization
from airflow.triggers.callback import CallbackTrigger
bag = DagBag(dag_folder=str(folder))
deadlines = {}
for dag_id, dag in bag.dags.items():
    for alert in DagSerialization.serialize_dag(dag).get("deadline") or []:  # as stored
        callback = alert["callback"]["__data__"]
        deadlines[dag_id] = {"interval_s": alert["interval"]["__data__"],
                             "reference": alert["reference"]["reference_type"],
                             "path": callback["path"], "kwargs": callback["kwargs"]}
async def fire(alert):  # what the triggerer runs for a missed deadline
    trigger = CallbackTrigger(alert["path"], {**alert["kwargs"], "context": {}})
    return [event.payload async for event in trigger.run()]
events = asyncio.run(fire(deadlines["redis_stream_recovery"])) if deadlines else []
print("RESULT " + json.dumps({"errors": {k: str(v) for k, v in bag.import_errors.items()},
                              "deadlines": deadlines, "events": events}, default=str))
"""


def result_of(done: subprocess.CompletedProcess[str]) -> dict:
    """The RESULT line of a finished script, with its whole output as ``output``."""
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("RESULT ")]
    assert lines, done.stdout[-3000:] + done.stderr[-3000:]
    return {**json.loads(lines[-1].removeprefix("RESULT ")),
            "output": done.stdout + done.stderr}


Run = tuple[str, dict | None, dict[str, str]]  # a DAG id, its params (conf), its Variables


def airflow_argv(runs: list[Run]) -> list[str]:
    """RUNNER's command line: parse the DAG folder, then run each of `runs` in turn."""
    asked = [{"dag_id": dag_id, "conf": conf or {}, "variables": variables}
             for dag_id, conf, variables in runs]
    return [AIRFLOW_PYTHON or "", "-c", RUNNER, str(ROOT / "dags"), str(ROOT),
            json.dumps(asked)]


def airflow_run(env: dict[str, str], dag_id: str | None = None, conf: dict | None = None,
                **variables: str) -> dict:
    """Parse the DAGs; with `dag_id`, run that DAG once (`conf`: its params) with these
    Airflow Variables. Returns ``errors``, ``tasks``, ``timeouts``, ``output`` and, for a run,
    ``state``, ``run_id``, ``run_after``, ``xcom`` and ``task_states`` by task id (or
    ``error`` when Airflow refused to start the run)."""
    if dag_id is None:
        return airflow_runs(env, [])
    return airflow_runs(env, [(dag_id, conf, variables)])["runs"][0]


def airflow_runs(env: dict[str, str], runs: list[Run]) -> dict:
    """Parse the DAGs, then run each of `runs` in turn in the same Airflow process (one
    interpreter start and one DAG folder parse for all; each run's Variables set only while
    it runs): ``errors``, ``tasks``, ``timeouts``, ``output``, and ``runs``, each run's result
    as :func:`airflow_run` gives it, with the same ``output``."""
    done = subprocess.run(airflow_argv(runs), env=env, capture_output=True, text=True,
                          timeout=600 + 300 * len(runs))
    result = result_of(done)
    result["runs"] = [{**run, "output": result["output"], "errors": result["errors"]}
                      for run in result["runs"]]
    return result


def airflow_start(env: dict[str, str], dag_id: str, **variables: str
                  ) -> subprocess.Popen[str]:
    """Start a run of `dag_id` (RUNNER) without waiting: finish it with airflow_finish."""
    return subprocess.Popen(airflow_argv([(dag_id, {}, variables)]), env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def airflow_finish(run: subprocess.Popen[str], timeout_s: float = 600) -> dict:
    """The result of a run started with airflow_start."""
    stdout, stderr = run.communicate(timeout=timeout_s)
    result = result_of(subprocess.CompletedProcess(run.args, run.returncode, stdout, stderr))
    return {**result["runs"][0], "output": result["output"]}


def answer_approval(env: dict[str, str], dag_id: str, task_id: str, answer: str) -> dict:
    """Wait (up to 4 min) for the unanswered human-in-the-loop task `task_id` of `dag_id`, then
    answer it with `answer` (``-``: only wait) through Airflow's REST API. Returns ``asked``
    (the open HITL details, as the API lists them) and ``answer`` (status and body)."""
    argv = [AIRFLOW_PYTHON or "", "-c", APPROVER, dag_id, task_id, answer]
    all_admins = {**env, "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True"}
    return result_of(subprocess.run(argv, env=all_admins, capture_output=True, text=True,
                                    timeout=300))


def fire_deadline(env: dict[str, str], folder: Path, notify_file: Path) -> dict:
    """DEADLINE with a copy of the DAG file in `folder`: ``errors``, ``deadlines`` (by DAG:
    interval, reference, callback path and kwargs, as serialised) and ``events`` (the
    CallbackTrigger's, for redis_stream_recovery's)."""
    argv = [AIRFLOW_PYTHON or "", "-c", DEADLINE, str(ROOT),
            str(ROOT / "dags" / "redis_stream_recovery.py"), str(folder), str(notify_file)]
    return result_of(subprocess.run(argv, env=env, capture_output=True, text=True,
                                    timeout=300))
