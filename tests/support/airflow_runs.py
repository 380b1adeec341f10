"""Airflow, driven from the project's tests. Airflow lives in its own venv (AIRFLOW_PYTHON), so
the tests talk to processes of that venv, each answering with one ``<KIND> <json>`` line:

- :class:`SharedAirflow`: one Airflow process (tests/support/airflow_server.py) for all the DAG
  tests of a module: it migrates the database and parses the DAG folder once, then runs what
  each test asks (DAG runs with ``dag.test()``, the deadline callback), one request at a time,
  each request's output (Airflow's and the tasks' logs, the job's output) in a file of its own.
- :class:`Approver`: one process (tests/support/airflow_approver.py) that waits for a
  human-in-the-loop question and answers it through Airflow's REST API when told.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import queue
import subprocess
import threading
from pathlib import Path
from typing import IO, Any

ROOT = Path(__file__).resolve().parents[2]
AIRFLOW_PYTHON = os.environ.get("AIRFLOW_PYTHON")

Run = tuple[str, dict | None, dict[str, str]]  # a DAG id, its params (conf), its Variables


class Channel:
    """The ``<KIND> <json>`` lines of a process's stdout, read by a thread as they come."""

    def __init__(self, stream: IO[str]) -> None:
        self.lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, args=(stream,), daemon=True).start()

    def _read(self, stream: IO[str]) -> None:
        for line in stream:
            self.lines.put(line)
        self.lines.put(None)  # the process closed its stdout

    def expect(self, kind: str, timeout_s: float) -> dict[str, Any] | None:
        """The body of the next `kind` line; None when none came within `timeout_s` or the
        stream ended first (other lines are skipped)."""
        while True:
            try:
                line = self.lines.get(timeout=timeout_s)
            except queue.Empty:
                return None
            if line is None:
                return None
            if line.startswith(kind + " "):
                return json.loads(line.removeprefix(kind + " "))


def airflow_process(module: str, args: list[str], env: dict[str, str],
                    log: Path) -> subprocess.Popen[str]:
    """`module` of tests/support run with AIRFLOW_PYTHON from the checkout, stdin and stdout
    piped, stderr to `log`."""
    with log.open("a") as err:
        return subprocess.Popen([AIRFLOW_PYTHON or "", "-m", module, *args], cwd=ROOT, env=env,
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err,
                                text=True)


def end(process: subprocess.Popen[str]) -> None:
    """Close the stdin of `process` (it exits at the end of its input), killed after 30 s."""
    if process.stdin and not process.stdin.closed:
        process.stdin.close()
    try:
        process.wait(30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def tail(path: Path) -> str:
    """The last 3000 characters of `path` (empty when it does not exist)."""
    return path.read_text(errors="replace")[-3000:] if path.exists() else ""


class Pending:
    """A request sent to the shared Airflow process; :meth:`result` waits for its answer."""

    def __init__(self, server: SharedAirflow, out: Path, timeout_s: float) -> None:
        self.server, self.out, self.timeout_s = server, out, timeout_s
        self.body: dict[str, Any] | None = None

    def result(self) -> dict[str, Any]:
        """The answer, with the request's whole output as ``output``; the shared process is
        stopped (and the test fails) when no answer came within the request's timeout."""
        if self.body is None:
            body = self.server.channel.expect("RESULT", self.timeout_s)
            if self.server.pending is self:
                self.server.pending = None
            if body is None:
                self.server.stop()
                raise AssertionError(f"no answer from the shared Airflow process within "
                                     f"{self.timeout_s} s (stopped it):\n{tail(self.out)}"
                                     f"\n{tail(self.server.log)}")
            self.body = {**body, "output": self.out.read_text(errors="replace")}
        assert "failure" not in self.body, self.body["failure"] + "\n" + self.body["output"][-3000:]
        return self.body

    def runs(self) -> list[dict[str, Any]]:
        """The runs of a ``runs`` request, each as :meth:`SharedAirflow.run` gives it."""
        return results(self.result())


class SharedAirflow:
    """One Airflow process (tests/support/airflow_server.py) with the environment `env` (its
    AIRFLOW_HOME among it), started by the constructor: the database migrated and the DAG
    folder parsed once (:attr:`parsed`: ``errors``, ``tasks``, ``timeouts``, ``parses``)."""

    def __init__(self, env: dict[str, str], workdir: Path, start_timeout_s: float = 600) -> None:
        self.workdir, self.log = workdir, workdir / "airflow.log"
        self.numbers = itertools.count(1)
        self.pending: Pending | None = None
        self.process = airflow_process("tests.support.airflow_server", [str(self.log)], env,
                                       self.log)
        assert self.process.stdout is not None
        self.channel = Channel(self.process.stdout)
        parsed = self.channel.expect("READY", start_timeout_s)
        if parsed is None:
            self.stop()
            raise AssertionError(f"the shared Airflow process did not start:\n{tail(self.log)}")
        self.parsed: dict[str, Any] = parsed

    def send(self, timeout_s: float, **request: Any) -> Pending:
        """Send one request (airflow_server.py's docstring) once the one before is answered."""
        if self.pending is not None:
            self.pending.result()
        assert self.process.poll() is None and self.process.stdin, "the shared Airflow is gone"
        out = self.workdir / f"request-{next(self.numbers)}.log"
        self.process.stdin.write(json.dumps({**request, "out": str(out)}) + "\n")
        self.process.stdin.flush()
        self.pending = Pending(self, out, timeout_s)
        return self.pending

    def start(self, runs: list[Run], env: dict[str, str] | None = None,
              notify_file: Path | None = None) -> Pending:
        """Run each of `runs` in turn (``dag.test()``; each run's Variables set only while it
        runs, `env` while they all run; with `notify_file`, a FileNotifier writing there in
        the DAG file's FAILURE_NOTIFIERS) without waiting: ``.result()`` gives what
        :meth:`runs` gives."""
        asked = [{"dag_id": dag_id, "conf": conf or {}, "variables": variables}
                 for dag_id, conf, variables in runs]
        return self.send(600 + 300 * len(runs), op="runs", runs=asked, env=env or {},
                         notify_file=str(notify_file) if notify_file else None)

    def runs(self, runs: list[Run], env: dict[str, str] | None = None,
             notify_file: Path | None = None) -> list[dict[str, Any]]:
        """Each run's result, as :meth:`run` gives it (all with the request's one output)."""
        return self.start(runs, env, notify_file).runs()

    def run(self, dag_id: str, conf: dict | None = None, env: dict[str, str] | None = None,
            **variables: str) -> dict[str, Any]:
        """One run of `dag_id` (`conf`: its params) with these Airflow Variables: ``state``,
        ``run_id``, ``dag_id``, ``run_after``, ``xcom`` and ``task_states`` by task id (or
        ``error`` when Airflow refused to start the run), ``output`` and ``parses``."""
        return self.runs([(dag_id, conf, variables)], env)[0]

    def deadline(self, folder: Path, notify_file: Path) -> dict[str, Any]:
        """A copy of the DAG file in `folder` with DEADLINE_CALLBACK filled (a FileNotifier to
        `notify_file`): ``errors``, ``deadlines`` (by DAG: interval, reference, callback path
        and kwargs, as serialised) and ``events`` (the CallbackTrigger's, for
        redis_stream_recovery's)."""
        return self.send(300, op="deadline", folder=str(folder), notify_file=str(notify_file),
                         dag_file=str(ROOT / "dags" / "redis_stream_recovery.py")).result()

    def stop(self) -> None:
        """Close its stdin (it exits), killed after 30 s."""
        end(self.process)


def results(answer: dict[str, Any]) -> list[dict[str, Any]]:
    """The runs of a ``runs`` answer, each with the answer's (the request's) output and
    ``parses`` (how often the shared process has parsed the DAG folder so far)."""
    return [{**run, "output": answer["output"], "parses": answer["parses"]}
            for run in answer["runs"]]


class Approver:
    """One approver process (tests/support/airflow_approver.py) for `task_id` of `dag_id`,
    started by the constructor: it waits for the question (:meth:`asked`), then answers it
    (:meth:`answer`)."""

    def __init__(self, env: dict[str, str], workdir: Path, dag_id: str, task_id: str) -> None:
        self.log = workdir / f"approver-{dag_id}-{task_id}.log"
        all_admins = {**env, "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True"}
        self.process = airflow_process("tests.support.airflow_approver", [dag_id, task_id],
                                       all_admins, self.log)
        assert self.process.stdout is not None
        self.channel = Channel(self.process.stdout)
        self.question: dict[str, Any] | None = None
        self.answered = False

    def asked(self, timeout_s: float = 300) -> dict[str, Any]:
        """``asked`` (the open HITL details, as the API lists them; empty when no question came
        within 4 min) and ``output`` (the approver's log)."""
        body = self.channel.expect("ASKED", timeout_s)
        assert body is not None, tail(self.log)
        self.question = body
        return {**body, "output": tail(self.log)}

    def answer(self, choice: str, timeout_s: float = 120) -> dict[str, Any]:
        """Choose `choice`: ``answer`` (the API's status and body) and ``output``."""
        assert self.process.stdin is not None
        self.process.stdin.write(choice + "\n")
        self.process.stdin.flush()
        self.answered = True
        body = self.channel.expect("RESULT", timeout_s)
        assert body is not None, tail(self.log)
        return {**body, "output": tail(self.log)}

    def close(self) -> None:
        """End the process; a question it saw and nobody answered gets "Reject", so the DAG
        run waiting for it ends (its apply skipped)."""
        if self.process.poll() is None and self.question and self.question["asked"] \
                and not self.answered:
            with contextlib.suppress(AssertionError):  # the test's own failure comes first
                self.answer("Reject")
        end(self.process)
