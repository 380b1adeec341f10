"""The example DAGs in dags/ under a real Airflow 3 (providers-standard for the approval).

Airflow (about 660 MB with its dependencies) lives in its own virtualenv, never in the
project's: these tests run when AIRFLOW_PYTHON names that venv's interpreter. ``make test``
(and so CI) makes that venv (``.venv-airflow``, from ``tests/airflow-requirements.txt``, about
30 s) and sets it; a plain ``pytest`` without it skips them, saying so. By hand:

    python3 -m venv .venv-airflow
    .venv-airflow/bin/pip install -r tests/airflow-requirements.txt
    AIRFLOW_PYTHON=.venv-airflow/bin/python \
        .venv/bin/python -m pytest -m airflow tests/integration/test_airflow_dag.py

Each DAG run is real: the project venv's ``redis-stream-recovery`` (spark-submit, local[2])
runs the job against a throwaway Redis; the test checks the task state, the XCom value and
Redis itself. One Airflow process serves the whole module (:func:`airflow`: the database
migrated and the DAG folder parsed once, each test's runs one request), one approver process
answers the reviewed DAG's approval through the REST API: tests/support/airflow_runs.py.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from redis import Redis

from recovery.redis_io.dlq_names import dead_letter_key
from recovery.testing.backlog import add_entries, deliver, make_stuck, seed_demo_backlog
from recovery.testing.local_redis import LocalServer
from tests.support.airflow_runs import AIRFLOW_PYTHON, ROOT, Approver, SharedAirflow
from tests.support.servers import start_server

pytestmark = [
    pytest.mark.airflow,
    pytest.mark.slow,  # an Airflow process, and a job per DAG run
    pytest.mark.xdist_group("airflow"),  # one worker: one Airflow process for the module
    pytest.mark.skipif(not AIRFLOW_PYTHON, reason="Airflow lives in its own venv: run `make "
                       "test`, or set AIRFLOW_PYTHON=.venv-airflow/bin/python (see the module "
                       "docstring)"),
]

@pytest.fixture(scope="module")
def airflow_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The environment of a fresh AIRFLOW_HOME (its SQLite database migrated by
    :func:`airflow`) with no connection at all (a test adds one as AIRFLOW_CONN_<ID> for its
    runs only, SPARK_CONNECTION). (No ``dags reserialize``: ``dag.test()`` writes the DAG
    bundle's serialised DAGs to the database itself first.)"""
    home = tmp_path_factory.mktemp("airflow-home")
    venv_bin = Path(sys.executable).parent
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW_CONN_")}
    env = {**env, "AIRFLOW_HOME": str(home), "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
           "AIRFLOW__CORE__DAGS_FOLDER": str(ROOT / "dags"),
           "AIRFLOW_VAR_RECOVERY_APP_DIR": str(ROOT),
           # the project's redis-stream-recovery and spark-submit
           "PATH": f"{venv_bin}{os.pathsep}{os.environ['PATH']}",
           "PYSPARK_PYTHON": sys.executable}
    env.pop("RECOVERY_REDIS__PASSWORD", None)  # the connection's or none
    return env


@pytest.fixture(scope="module")
def airflow(airflow_env, tmp_path_factory) -> Iterator[SharedAirflow]:
    """The one Airflow process of the module: database migrated, DAG folder parsed once."""
    server = SharedAirflow(airflow_env, tmp_path_factory.mktemp("airflow-requests"))
    yield server
    server.stop()


def write_config(tmp_path: Path, url: str) -> Path:
    config = tmp_path / "recovery.toml"
    config.write_text(f'[redis]\nurl = "{url}"\n[streams]\nmatch = "*"\n'
                      '[handler]\npath = "recovery.handlers:example_handler"\n'  # no default
                      f'[report]\npath = "{tmp_path / "reports"}"\n')
    return config


SPARK_CONNECTION = {"AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({"conn_type": "spark",
                                                              "host": "local[2]"})}


def job_run_id(run: dict, task_id: str, try_number: int = 1) -> str:
    """The --run-id the DAGs give the job for one try of `task_id` in the Airflow run `run`
    (the contract the DAG module's docstring states): time, task, try, hash of the DAG and
    run ids."""
    digest = hashlib.sha256(f"{run['dag_id']}/{run['run_id']}".encode()).hexdigest()[:8]
    return f"{run['run_after']}-{task_id}-{try_number}-{digest}"


def assert_traceable(summary: dict, run: dict, task_id: str) -> None:
    """The job's run id is the short form; the summary keeps Airflow's run id in full."""
    assert summary["run_id"] == job_run_id(run, task_id)
    assert len(summary["run_id"]) <= 16 + len(task_id) + 12, summary["run_id"]
    assert summary["scheduler_run_id"] == run["run_id"]


NO_PLAN = ({}, {"plan": ""}, {"plan": "  "})  # apply_plan's triggers without a plan


@pytest.fixture(scope="module")
def dead_letters_server() -> Iterator[LocalServer]:
    """A Redis with a source stream and three dead letters in ``{orders}:dlq``, for the dead
    letters DAG's run in :func:`parsed_and_refused` (nothing else touches it)."""
    srv = start_server("redis")
    client = srv.client()
    client.xadd("orders", {"p": "0"})
    for n in range(3):
        client.xadd("{orders}:dlq", {"p": str(n), "x-original-stream": "orders",
                                     "x-original-id": f"1-{n}",
                                     "x-death-reason": "max-deliveries-exceeded"})
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def dead_letters_before(dead_letters_server) -> list:
    """The dead letters as seeded, read before any DAG runs."""
    return dead_letters_server.client().xrange("{orders}:dlq")


@pytest.fixture(scope="module")
def parsed_and_refused(airflow, dead_letters_server, dead_letters_before,
                       tmp_path_factory) -> dict:
    """The shared process's parse of the DAG folder, and one request for the runs that need
    nothing done between them: the apply DAG triggered with each of NO_PLAN (``runs[:3]``),
    then the dead letters DAG against :func:`dead_letters_server` (``runs[3]``)."""
    config = write_config(tmp_path_factory.mktemp("dead-letters"), dead_letters_server.url)
    return {**airflow.parsed, "runs": airflow.runs([
        *[("redis_stream_apply_plan", conf, {}) for conf in NO_PLAN],
        ("redis_stream_dead_letters", None, {"recovery_config": str(config)})])}


def test_dags_parse_with_a_timeout_on_every_task(parsed_and_refused):
    result = parsed_and_refused
    assert result["errors"] == {}
    hour, five_minutes = 3600.0, 300.0
    assert result["timeouts"] == {
        "redis_stream_recovery": {"recover": hour},
        "redis_stream_reviewed_recovery": {"dry_run": hour, "has_plan": five_minutes,
                                           "approve": five_minutes, "apply_plan": hour},
        "redis_stream_dry_run": {"dry_run": hour},
        "redis_stream_apply_plan": {"apply_plan": hour},
        "redis_stream_redrive": {"redrive": hour},
        "redis_stream_dead_letters": {"dead_letters": hour}}
    assert result["tasks"]["redis_stream_reviewed_recovery"]["approve"] == "ApprovalOperator"


PASSWORD = "airflow-conn-s3cret"


def test_recovery_dag_runs_the_job_with_the_connection_password(airflow, redis_server,
                                                                tmp_path):
    """The scheduled DAG against a Redis that wants a password only the Airflow connection
    ``redis_recovery`` holds (the config file has none): the job logs in, its summary is the
    task's XCom, its run id is made from Airflow's, and no output names the password."""
    seed_demo_backlog(redis_server.client(), per_stream=200)
    redis_server.client().config_set("requirepass", PASSWORD)
    client = Redis(port=redis_server.port, password=PASSWORD)
    config = write_config(tmp_path, redis_server.url)
    conn = {"AIRFLOW_CONN_REDIS_RECOVERY": json.dumps({"conn_type": "generic",
                                                       "password": PASSWORD}),
            **SPARK_CONNECTION}

    result = airflow.run("redis_stream_recovery", env=conn, recovery_config=str(config))

    assert result["state"] == "success", result["output"][-3000:]
    summary = result["xcom"]["recover"]
    # 3 streams x 2 groups, every 40th of the 150 stuck entries is poison: 4 per group.
    assert (summary["status"], summary["totals"]["dead_lettered"]) == ("ok", 24)
    streams = ("orders", "payments", "shipments{eu}")
    dead = [f for s in streams for _, f in client.xrange(dead_letter_key(s, ":dlq"))]
    assert len(dead) == 24
    run_id = job_run_id(result, "recover")
    assert_traceable(summary, result, "recover")
    assert {f[b"x-run-id"].decode() for f in dead} == {run_id}
    assert "-- --master local[2] --name redis-stream-recover" in result["output"]
    assert summary["report_path"] == f"{tmp_path}/reports/entries/run_id={run_id}"
    assert Path(summary["report_path"]).is_dir()
    assert f"redis-stream-recovery run --config {config} --run-id {run_id}" in result["output"]
    assert PASSWORD not in result["output"]


def test_redrive_dag_dry_run_and_a_failing_job_calls_the_failure_notifiers(
        airflow, redis_server, tmp_path):
    client = redis_server.client()
    client.xadd("orders", {"p": "0"})  # streams.match finds existing sources only
    for n, group in enumerate(("g", "other-team")):  # the other team's: filtered out
        client.xadd("{orders}:dlq", {"p": str(n), "x-original-stream": "orders",
                                     "x-original-group": group, "x-original-id": f"1-{n}",
                                     "x-death-reason": "max-deliveries-exceeded"})
    config = write_config(tmp_path, redis_server.url)
    # The form's reasons and groups left empty keep the file's filters (an empty --set would
    # unset them and redrive the other team's letter too).
    config.write_text(config.read_text() + '[redrive]\ngroups = ["g"]\n')
    notified = tmp_path / "notified.jsonl"  # FAILURE_NOTIFIERS: a FileNotifier writing here

    dry, failed = airflow.runs([  # one request, two runs of the DAG
        ("redis_stream_redrive", None, {"recovery_config": str(config)}),
        ("redis_stream_redrive", None, {"recovery_config": str(tmp_path / "missing.toml")}),
    ], notify_file=notified)

    assert dry["state"] == "success", dry["output"][-3000:]
    assert dry["xcom"]["redrive"]["dry_run"] is True
    assert dry["xcom"]["redrive"]["totals"]["matched"] == 1
    assert client.xlen("{orders}:dlq") == 2  # the DAG's default is a dry run
    assert (failed["state"], failed["xcom"]) == ("failed", {})  # exit 2: the task failed
    calls = [json.loads(line) for line in notified.read_text().splitlines()]
    assert [(c["dag_id"], c["task_id"], c["run_id"]) for c in calls] == [
        ("redis_stream_redrive", "redrive", failed["run_id"])]  # the failure only, once
    assert "exception" in calls[0]["context_keys"]


def test_deadline_callback_is_serialised_and_fires_the_notifier(airflow, tmp_path):
    """DEADLINE_CALLBACK filled with a notifier (as the DAG file's comment says): both
    scheduled DAGs carry a deadline alert, serialised as Airflow stores it; the triggerer's
    CallbackTrigger run on it calls the notifier. (A missed deadline itself is the
    scheduler's to detect, which dag.test() does not run.)"""
    folder = tmp_path / "dags"
    folder.mkdir()
    notified = tmp_path / "deadline.jsonl"

    result = airflow.deadline(folder, notified)

    assert result["errors"] == {}
    callback = {"path": "tests.support.airflow_notifier.FileNotifier",
                "kwargs": {"path": str(notified)}, "reference": "DagRunQueuedAtDeadline"}
    assert result["deadlines"] == {
        "redis_stream_recovery": {**callback, "interval_s": 1800.0},
        "redis_stream_dead_letters": {**callback, "interval_s": 7200.0}}
    assert [e["state"] for e in result["events"]] == ["running", "success"], result["events"]
    assert len(notified.read_text().splitlines()) == 1


def stuck_entries(client: Redis, count: int, delivery_count: int = 1) -> list[str]:
    """`count` new entries of ``orders``, pending in ``billing`` for a crashed consumer for an
    hour, delivered `delivery_count` times; their IDs."""
    add_entries(client, "orders", count, lambda i: {"n": str(i)})
    ids = deliver(client, "orders", "billing", "worker-1-crashed", count)
    make_stuck(client, "orders", "billing", "worker-1-crashed", ids, 3_600_000, delivery_count)
    return ids


def pel(client: Redis) -> list[str]:
    """The IDs pending in ``orders`` / ``billing``, in order."""
    rows = client.xpending_range("orders", "billing", "-", "+", 1000)
    return [r["message_id"].decode() for r in rows]


def nonzero(totals: dict[str, int]) -> dict[str, int]:
    return {action: n for action, n in totals.items() if n}


def plan_backlog(client: Redis, tmp_path: Path, url: str) -> tuple[list[str], list[str], str]:
    """The reviewed recovery's backlog: 6 stuck entries of orders/billing and 2 over
    claim.max_deliveries (5); returns them and the config file's path."""
    client.xgroup_create("orders", "billing", id="0", mkstream=True)
    ok = stuck_entries(client, 6)
    poison = stuck_entries(client, 2, delivery_count=9)
    return ok, poison, str(write_config(tmp_path, url))


@pytest.mark.timeout(600)
def test_reviewed_recovery_dag_applies_exactly_the_approved_plan(airflow, airflow_env,
                                                                 redis_server, tmp_path):
    """One DAG: the dry run changes nothing, the approval waits for a person (answered here
    through Airflow's REST API, by one approver process that waits for the question, then
    answers when told) and shows the plan; after the approval the apply acks and
    dead-letters exactly the planned entries, not those stuck while it waited."""
    client = redis_server.client()
    ok, poison, config = plan_backlog(client, tmp_path, redis_server.url)

    approver = Approver(airflow_env, tmp_path, "redis_stream_reviewed_recovery", "approve")
    try:
        run = airflow.start([("redis_stream_reviewed_recovery", None,
                              {"recovery_config": config})])
        waiting = approver.asked()
        assert len(waiting["asked"]) == 1, waiting["output"]
        assert (pel(client), client.exists("{orders}:dlq")) == (ok + poison, 0)  # dry run
        later = stuck_entries(client, 3)  # not in the plan
        approved = approver.answer("Approve")
        result = run.runs()[0]
    finally:
        approver.close()  # an unanswered question: Reject, so the shared run ends

    assert approved["answer"]["status"] == 200, approved["answer"]
    assert result["state"] == "success", result["output"][-3000:]
    plan, summary = result["xcom"]["dry_run"], result["xcom"]["apply_plan"]
    assert (plan["dry_run"], nonzero(plan["totals"])) == (True, {"would_reprocess": 6,
                                                                 "would_dead_letter": 2})
    assert_traceable(plan, result, "dry_run")
    assert plan["report_path"] in waiting["asked"][0]["body"]  # the approver sees the plan
    assert '"would_dead_letter": 2' in waiting["asked"][0]["body"]
    assert (summary["dry_run"], summary["plan"], nonzero(summary["totals"])) == (
        False, plan["report_path"], {"reprocessed": 6, "dead_lettered": 2})
    assert_traceable(summary, result, "apply_plan")
    assert pel(client) == later
    dead = client.xrange("{orders}:dlq")
    assert sorted(f[b"x-original-id"].decode() for _, f in dead) == sorted(poison)


@pytest.mark.timeout(1200)  # two DAG runs, each an Airflow and a spark-submit start
def test_dry_run_then_apply_plan_dags_do_exactly_the_plan(airflow, redis_server, tmp_path):
    """The same by hand, in two DAGs, as shipped on a fresh Airflow home without any
    connection (spark-submit's default local master runs the job): the dry run DAG changes
    nothing and names its plan in XCom; the apply DAG, given it, acks and dead-letters exactly
    the planned entries, not those stuck after the plan (a plain recovery would take them).
    The job's consumer names in Redis carry the short run id, the summary Airflow's in full.
    (A real run's report given as the plan is refused with exit 2, Redis unchanged:
    tests/unit/driver/test_plan.py::test_a_plan_that_cannot_be_applied_is_refused_in_one_line
    [real run]; a job's exit 2 fails its task: the failing run of
    test_redrive_dag_dry_run_and_a_failing_job_calls_the_failure_notifiers.)"""
    client = redis_server.client()
    ok, poison, config = plan_backlog(client, tmp_path, redis_server.url)

    dry = airflow.run("redis_stream_dry_run", recovery_config=config)
    assert dry["state"] == "success", dry["output"][-3000:]
    plan = dry["xcom"]["dry_run"]
    assert (plan["dry_run"], nonzero(plan["totals"])) == (True, {"would_reprocess": 6,
                                                                 "would_dead_letter": 2})
    assert plan["report_path"] == f"{tmp_path}/reports/entries/run_id={plan['run_id']}"
    assert_traceable(plan, dry, "dry_run")
    assert "no Airflow connection 'spark_default'" in dry["output"]
    assert " -- --name redis-stream-dry-run" in dry["output"]  # no --master: the default
    assert (pel(client), client.exists("{orders}:dlq")) == (ok + poison, 0)  # nothing changed
    assert [c["name"] for c in client.xinfo_consumers("orders", "billing")] == [
        b"worker-1-crashed"]  # nothing claimed
    later = stuck_entries(client, 3)  # not in the plan

    applied = airflow.run("redis_stream_apply_plan", {"plan": plan["report_path"]},
                          recovery_config=config)
    assert applied["state"] == "success", applied["output"][-3000:]
    summary = applied["xcom"]["apply_plan"]
    assert (summary["dry_run"], summary["plan"], nonzero(summary["totals"])) == (
        False, plan["report_path"], {"reprocessed": 6, "dead_lettered": 2})
    assert_traceable(summary, applied, "apply_plan")
    assert pel(client) == later
    dead = client.xrange("{orders}:dlq")
    assert sorted(f[b"x-original-id"].decode() for _, f in dead) == sorted(poison)
    assert {f[b"x-run-id"].decode() for _, f in dead} == {summary["run_id"]}
    assert [c["name"].decode() for c in client.xinfo_consumers("orders", "billing")] == [
        "worker-1-crashed"]  # the job's consumers (recovery-<short id>-<part>) are gone
    assert applied["parses"] == 1  # the shared process's one parse served every dag.test()



def test_apply_plan_dag_refuses_a_trigger_without_a_plan(parsed_and_refused):
    for conf, result in zip(NO_PLAN, parsed_and_refused["runs"][:3], strict=True):
        assert result["state"] == "not started", (conf, result)
        assert "plan" in result["error"], result["error"]


def test_dead_letters_dag_reads_the_dead_letters_and_leaves_them(parsed_and_refused,
                                                                  dead_letters_server,
                                                                  dead_letters_before):
    client = dead_letters_server.client()
    result = parsed_and_refused["runs"][3]

    assert result["state"] == "success", result["output"][-3000:]
    summary = result["xcom"]["dead_letters"]
    assert summary["status"] == "ok"
    assert_traceable(summary, result, "dead_letters")
    assert (summary["totals"]["dead_letter_streams"], summary["totals"]["dead_letters"]) == (1, 3)
    assert Path(summary["report_path"]).is_dir()
    assert client.xrange("{orders}:dlq") == dead_letters_before  # a read: Redis unchanged
