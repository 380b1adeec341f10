"""The person who answers a human-in-the-loop task, through Airflow's REST API (run inside the
Airflow venv as ``AIRFLOW_PYTHON -m tests.support.airflow_approver DAG_ID TASK_ID`` from the
checkout; never imported by the project's venv). Driven by tests/support/airflow_runs.py.

It waits (up to 4 min) for an unanswered question of TASK_ID in a run of DAG_ID and prints
``ASKED <json>`` (``asked``: the open HITL details, as the API lists them; empty when none came).
Then it reads one line from stdin, the option to choose (``-`` or nothing: answer nothing),
answers through the API (``PATCH .../taskInstances/<task>/-1/hitlDetails``) and prints
``RESULT <json>`` (``answer``: the reply's status and body). The API is the api-server's own
app, in this process, on the same metadata database as the DAG run.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

WAIT_S = 240


def wait_for_question(api: Any, dag_id: str, task_id: str) -> list[dict[str, Any]]:
    """The open (unanswered) HITL details of `task_id`, polled each second up to WAIT_S."""
    deadline = time.monotonic() + WAIT_S
    while True:
        got = api.get(f"/api/v2/dags/{dag_id}/dagRuns/~/hitlDetails")
        details = [d for d in got.json().get("hitl_details", [])
                   if d["task_instance"]["task_id"] == task_id and not d["response_received"]]
        if details or time.monotonic() > deadline:
            return details
        time.sleep(1)


def main(argv: list[str]) -> int:
    """Wait, print ASKED, read the answer, answer, print RESULT."""
    from airflow.api_fastapi.app import create_app
    from fastapi.testclient import TestClient

    dag_id, task_id = argv
    api = TestClient(create_app("core"))
    details = wait_for_question(api, dag_id, task_id)
    print("ASKED " + json.dumps({"asked": details}), flush=True)
    choice = sys.stdin.readline().strip()
    result: dict[str, Any] = {}
    if details and choice not in ("", "-"):
        ti = details[0]["task_instance"]
        done = api.patch(f"/api/v2/dags/{dag_id}/dagRuns/{ti['dag_run_id']}/taskInstances/"
                         f"{task_id}/-1/hitlDetails", json={"chosen_options": [choice]})
        result["answer"] = {"status": done.status_code, "body": done.json()}
    print("RESULT " + json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
