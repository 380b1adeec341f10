"""One Airflow process for every DAG test of a module (run inside the Airflow venv as
``AIRFLOW_PYTHON -m tests.support.airflow_server LOG`` from the checkout; never imported by the
project's venv). Driven by tests/support/airflow_runs.py.

At start it migrates the (fresh) AIRFLOW_HOME's SQLite database, as ``airflow db migrate``
does, parses the DAG folder once with Airflow's BundleDagBag and answers ``READY <json>``
(``errors``, ``tasks``, ``timeouts``). Every later parse of that folder in this process,
including the one each ``dag.test()`` makes before it syncs the bundle to the database, gets
that same bag: ``parses`` in each answer counts the folder parses (1).

Then it serves requests, one JSON line each on stdin, answered one ``RESULT <json>`` line each
on the channel it started with (its stdout then). While a request runs, the process's stdout
and stderr (Airflow's log, the tasks' logs with the job's output) go to the file named by the
request's ``out``; between requests, to LOG. Requests (``env``: environment variables set for
the request only, e.g. ``AIRFLOW_CONN_<ID>``):

- ``{"op": "runs", "runs": [{"dag_id", "conf", "variables"}], "env", "notify_file", "out"}``:
  each DAG run with ``dag.test()``, one after the other, each with its Airflow Variables set
  only while it runs; with ``notify_file``, a FileNotifier (tests/support/airflow_notifier.py)
  is in the DAG file's FAILURE_NOTIFIERS for the request, as a user fills that hook.
  Answers ``runs``: per run ``state``, ``run_id``, ``dag_id``, ``run_after``, ``xcom``,
  ``task_states`` (or ``state`` "not started" and ``error`` when Airflow refused the run).
- ``{"op": "deadline", "dag_file", "folder", "notify_file", "out"}``: parses a copy of the DAG
  file in ``folder`` whose DEADLINE_CALLBACK is filled with a FileNotifier, and runs the
  serialised deadline callback of ``redis_stream_recovery`` with Airflow's CallbackTrigger, as
  the triggerer does. Answers ``errors``, ``deadlines`` (by DAG) and ``events``.

stdin closed: the process exits.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

HOOK = "DEADLINE_CALLBACK: AsyncCallback | None = None"  # the DAG file's documented hook line


def point_output(path: str) -> None:
    """Send this process's stdout and stderr (file descriptors 1 and 2) to `path` (appended)."""
    sys.stdout.flush()
    sys.stderr.flush()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


@contextlib.contextmanager
def environment(values: dict[str, str]) -> Iterator[None]:
    """`values` in os.environ while the block runs, the earlier values (or none) after it."""
    before = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


class ParsedOnce:
    """Airflow's BundleDagBag, built once per set of arguments: installed in its module, so
    ``dag.test()`` gets the bag parsed at start instead of parsing the folder again."""

    def __init__(self) -> None:
        import airflow.dag_processing.dagbag as dagbag_module

        self.module = dagbag_module
        self.original = dagbag_module.BundleDagBag
        self.bags: dict[str, Any] = {}
        dagbag_module.BundleDagBag = self  # type: ignore[assignment]

    def __call__(self, **kwargs: Any) -> Any:
        key = json.dumps(kwargs, default=str, sort_keys=True)
        if key not in self.bags:
            self.bags[key] = self.original(**kwargs)
        return self.bags[key]


def start(parsed: ParsedOnce) -> Any:
    """Migrate the database (a fresh one: created from Airflow's models, as ``airflow db
    migrate`` does) and parse the DAG folder's bundle: the bag."""
    from airflow.dag_processing.bundles.manager import DagBundlesManager
    from airflow.utils import db

    db.upgradedb()
    bundle = DagBundlesManager().get_bundle("dags-folder")
    return parsed(dag_folder=bundle.path, bundle_path=bundle.path, bundle_name=bundle.name)


def describe(bag: Any) -> dict[str, Any]:
    """The parse: import errors by file, each DAG's task classes and execution timeouts (s)."""
    return {"errors": {k: str(v) for k, v in bag.import_errors.items()},
            "tasks": {d: {t.task_id: type(t).__name__ for t in dag.tasks}
                      for d, dag in bag.dags.items()},
            "timeouts": {d: {t.task_id: t.execution_timeout
                             and t.execution_timeout.total_seconds() for t in dag.tasks}
                         for d, dag in bag.dags.items()}}


@contextlib.contextmanager
def notifier(bag: Any, notify_file: str | None) -> Iterator[None]:
    """With `notify_file`, a FileNotifier writing there in the DAG file's FAILURE_NOTIFIERS
    while the block runs (every DAG of the file shares that list)."""
    if not notify_file:
        yield
        return
    from tests.support.airflow_notifier import FileNotifier

    dag = next(iter(bag.dags.values()))
    hook = dag.tasks[0].on_failure_callback
    hook = hook[0] if isinstance(hook, list) else hook
    notifiers = hook.__globals__["FAILURE_NOTIFIERS"]
    added = FileNotifier(notify_file)
    notifiers.append(added)
    try:
        yield
    finally:
        notifiers.remove(added)


def run_dag(bag: Any, asked: dict[str, Any]) -> dict[str, Any]:
    """One ``dag.test()`` run of ``asked["dag_id"]`` with its conf and Variables: its state,
    ids, XCom return values and task states by task id."""
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    dag = bag.dags[asked["dag_id"]]
    variables = {"AIRFLOW_VAR_" + k.upper(): v for k, v in asked["variables"].items()}
    with environment(variables):  # this run's Airflow Variables, read as the tasks run
        try:
            run = dag.test(run_conf=asked["conf"])
        except Exception as exc:
            return {"state": "not started", "error": f"{type(exc).__name__}: {exc}"}
    with create_session() as session:
        rows = session.query(XComModel).filter_by(dag_id=run.dag_id, run_id=run.run_id,
                                                  key="return_value").all()
        tis = run.get_task_instances(session=session)
        return {"state": str(run.state), "run_id": run.run_id, "dag_id": run.dag_id,
                "run_after": run.run_after.strftime("%Y%m%dT%H%M%SZ"),
                "xcom": {r.task_id: r.value for r in rows},
                "task_states": {ti.task_id: str(ti.state) for ti in tis}}


def fire_deadline(dag_file: Path, folder: Path, notify_file: str) -> dict[str, Any]:
    """Parse a copy of `dag_file` in `folder` with DEADLINE_CALLBACK filled (a FileNotifier
    writing to `notify_file`); the deadline alerts as serialised, and the events of the
    CallbackTrigger run on redis_stream_recovery's (what the triggerer runs for a missed
    deadline)."""
    from airflow.dag_processing.dagbag import DagBag
    from airflow.serialization.serialized_objects import DagSerialization
    from airflow.triggers.callback import CallbackTrigger

    text = dag_file.read_text()
    assert HOOK in text, "the documented hook line is gone"
    (folder / dag_file.name).write_text(text.replace(HOOK, (
        "from tests.support.airflow_notifier import FileNotifier\n"
        f"DEADLINE_CALLBACK = AsyncCallback(FileNotifier, kwargs={{'path': {notify_file!r}}})")))
    bag = DagBag(dag_folder=str(folder))
    deadlines = {}
    for dag_id, dag in bag.dags.items():
        for alert in DagSerialization.serialize_dag(dag).get("deadline") or []:  # as stored
            callback = alert["callback"]["__data__"]
            deadlines[dag_id] = {"interval_s": alert["interval"]["__data__"],
                                 "reference": alert["reference"]["reference_type"],
                                 "path": callback["path"], "kwargs": callback["kwargs"]}

    async def fire(alert: dict[str, Any]) -> list[Any]:
        trigger = CallbackTrigger(alert["path"], {**alert["kwargs"], "context": {}})
        return [event.payload async for event in trigger.run()]

    events = asyncio.run(fire(deadlines["redis_stream_recovery"])) if deadlines else []
    return {"errors": {k: str(v) for k, v in bag.import_errors.items()},
            "deadlines": deadlines, "events": events}


def serve(request: dict[str, Any], bag: Any) -> dict[str, Any]:
    """The answer to one request (module docstring)."""
    with environment(request.get("env") or {}):
        if request["op"] == "deadline":
            return fire_deadline(Path(request["dag_file"]), Path(request["folder"]),
                                 request["notify_file"])
        with notifier(bag, request.get("notify_file")):
            return {"runs": [run_dag(bag, asked) for asked in request["runs"]]}


def answer(channel: TextIO, kind: str, body: dict[str, Any]) -> None:
    """One ``<KIND> <json>`` line on the channel."""
    channel.write(f"{kind} {json.dumps(body, default=str)}\n")
    channel.flush()


def main(argv: list[str]) -> int:
    """Start (migrate, parse), answer READY, then serve stdin's requests until it closes."""
    idle_log = argv[0]
    channel = os.fdopen(os.dup(1), "w")  # the answers' channel: stdout as it started
    point_output(idle_log)
    parsed = ParsedOnce()
    bag = start(parsed)
    answer(channel, "READY", {**describe(bag), "parses": len(parsed.bags)})
    for line in sys.stdin:
        request = json.loads(line)
        point_output(request["out"])
        try:
            body = serve(request, bag)
        except Exception as exc:  # the test reads it; the process serves the next one
            body = {"failure": f"{type(exc).__name__}: {exc}"}
        finally:
            point_output(idle_log)
        answer(channel, "RESULT", {**body, "parses": len(parsed.bags)})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
