"""The example DAGs in dags/ under a real Airflow 3 with the Spark provider.

Airflow (about 660 MB with its dependencies) lives in its own virtualenv, never in the
project's: these tests run when AIRFLOW_PYTHON names that venv's interpreter. ``make test``
(and so CI) makes that venv (``.venv-airflow``, from ``tests/airflow-requirements.txt``, about
30 s) and sets it; a plain ``pytest`` without it skips them, saying so. By hand:

    python3 -m venv .venv-airflow
    .venv-airflow/bin/pip install -r tests/airflow-requirements.txt
    AIRFLOW_PYTHON=.venv-airflow/bin/python \
        .venv/bin/python -m pytest -m airflow tests/test_airflow_dag.py

Each DAG run is real: spark-submit (the project venv's, local[2]) runs the job against a
throwaway Redis; the test checks the task state, the XCom value and Redis itself.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from redis import Redis

from recovery.redis_io.dlq_names import dead_letter_key
from recovery.testing.backlog import add_entries, deliver, make_stuck, seed_demo_backlog

AIRFLOW_PYTHON = os.environ.get("AIRFLOW_PYTHON")
ROOT = Path(__file__).resolve().parent.parent
pytestmark = [
    pytest.mark.airflow,
    pytest.mark.slow,  # an Airflow process per DAG run
    pytest.mark.xdist_group("airflow"),  # one worker: one Airflow home for the module
    pytest.mark.skipif(not AIRFLOW_PYTHON, reason="Airflow lives in its own venv: run `make "
                       "test`, or set AIRFLOW_PYTHON=.venv-airflow/bin/python (see the module "
                       "docstring)"),
]

# Runs inside the Airflow venv: parse the DAG folder, optionally run one DAG (with a run
# conf, JSON), print JSON. A run Airflow refuses to start (params) reports its error.
RUNNER = """
import json, sys
from airflow.dag_processing.dagbag import DagBag
bag = DagBag(dag_folder=sys.argv[1])
result = {"errors": {k: str(v) for k, v in bag.import_errors.items()},
          "tasks": {d: [type(t).__name__ for t in dag.tasks] for d, dag in bag.dags.items()}}
if len(sys.argv) > 2:
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session
    try:
        run = bag.dags[sys.argv[2]].test(run_conf=json.loads(sys.argv[3]))
    except Exception as exc:
        result.update(state="not started", error=f"{type(exc).__name__}: {exc}")
    else:
        with create_session() as session:
            rows = session.query(XComModel).filter_by(dag_id=run.dag_id, run_id=run.run_id,
                                                      key="return_value").all()
            result.update(state=str(run.state), xcom=[r.value for r in rows])
print("RESULT " + json.dumps(result))
"""


@pytest.fixture(scope="module")
def airflow_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """A fresh AIRFLOW_HOME with a migrated SQLite database and the DAGs serialised."""
    home = tmp_path_factory.mktemp("airflow-home")
    venv_bin = Path(sys.executable).parent
    env = {**os.environ, "AIRFLOW_HOME": str(home), "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
           "AIRFLOW__CORE__DAGS_FOLDER": str(ROOT / "dags"),
           "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({"conn_type": "spark", "host": "local[2]"}),
           "AIRFLOW_VAR_RECOVERY_APP_DIR": str(ROOT),
           "PATH": f"{venv_bin}{os.pathsep}{os.environ['PATH']}",  # the project's spark-submit
           "PYSPARK_PYTHON": sys.executable}
    airflow = str(Path(AIRFLOW_PYTHON or "").parent / "airflow")
    for command in (["db", "migrate"], ["dags", "reserialize"]):
        subprocess.run([airflow, *command], env=env, check=True, capture_output=True,
                       timeout=300)
    return env


def airflow_run(env: dict[str, str], dag_id: str | None = None, conf: dict | None = None,
                **variables: str) -> dict:
    """Parse the DAGs; with `dag_id`, run that DAG once (`conf`: its params) with these
    Airflow Variables. Returns ``errors``, ``tasks`` and, for a run, ``state`` and ``xcom``
    (or ``error`` when Airflow refused to start the run)."""
    extra = {f"AIRFLOW_VAR_{k.upper()}": v for k, v in variables.items()}
    run = [dag_id, json.dumps(conf)] if dag_id else []
    argv = [AIRFLOW_PYTHON or "", "-c", RUNNER, str(ROOT / "dags"), *run]
    done = subprocess.run(argv, env={**env, **extra}, capture_output=True, text=True,
                          timeout=600)
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("RESULT ")]
    assert lines, done.stdout[-3000:] + done.stderr[-3000:]
    return json.loads(lines[-1].removeprefix("RESULT "))


def write_config(tmp_path: Path, url: str) -> Path:
    config = tmp_path / "recovery.toml"
    config.write_text(f'[redis]\nurl = "{url}"\n[streams]\nmatch = "*"\n'
                      '[handler]\npath = "recovery.handlers:example_handler"\n'  # no default
                      f'[report]\npath = "{tmp_path / "reports"}"\n')
    return config


def test_dags_parse_without_import_errors(airflow_env):
    result = airflow_run(airflow_env)
    assert result["errors"] == {}
    assert result["tasks"] == {"redis_stream_recovery": ["RecoverySubmitOperator"],
                               "redis_stream_redrive": ["RecoverySubmitOperator"],
                               "redis_stream_dry_run": ["RecoverySubmitOperator"],
                               "redis_stream_apply_plan": ["RecoverySubmitOperator"]}


def test_recovery_dag_runs_the_job_and_pushes_its_summary(airflow_env, redis_server, tmp_path):
    client = redis_server.client()
    seed_demo_backlog(client, per_stream=200)
    config = write_config(tmp_path, redis_server.url)

    result = airflow_run(airflow_env, "redis_stream_recovery", recovery_config=str(config))

    assert result["state"] == "success"
    [summary] = result["xcom"]
    # 3 streams x 2 groups, every 40th of the 150 stuck entries is poison: 4 per group.
    assert (summary["status"], summary["totals"]["dead_lettered"]) == ("ok", 24)
    streams = ("orders", "payments", "shipments{eu}")
    assert sum(client.xlen(dead_letter_key(s, ":dlq")) for s in streams) == 24


def test_redrive_dag_dry_run_and_a_failing_job_fails_the_task(airflow_env, redis_server,
                                                              tmp_path):
    client = redis_server.client()
    client.xadd("orders", {"p": "0"})  # streams.match finds existing sources only
    client.xadd("{orders}:dlq", {"p": "1", "x-original-stream": "orders"})
    config = write_config(tmp_path, redis_server.url)

    dry = airflow_run(airflow_env, "redis_stream_redrive", recovery_config=str(config))
    failed = airflow_run(airflow_env, "redis_stream_redrive",
                         recovery_config=str(tmp_path / "missing.toml"))

    assert dry["state"] == "success"
    assert dry["xcom"][0]["dry_run"] is True
    assert dry["xcom"][0]["totals"]["matched"] == 1
    assert client.xlen("{orders}:dlq") == 1  # the DAG's default is a dry run
    assert (failed["state"], failed["xcom"]) == ("failed", [])  # exit 2: the task failed


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


def test_dry_run_then_apply_plan_dags_do_exactly_the_plan(airflow_env, redis_server, tmp_path):
    """The reviewed workflow: the dry run DAG changes nothing and names its plan in XCom; the
    apply DAG, given it, acks and dead-letters exactly the planned entries (entries stuck
    since are left pending); the apply DAG given a real run's report fails, Redis unchanged:
    a DAG that ran a plain recovery instead would take the entries stuck since."""
    client = redis_server.client()
    client.xgroup_create("orders", "billing", id="0", mkstream=True)
    ok = stuck_entries(client, 6)
    poison = stuck_entries(client, 2, delivery_count=9)  # over claim.max_deliveries (5)
    config = str(write_config(tmp_path, redis_server.url))

    dry = airflow_run(airflow_env, "redis_stream_dry_run", recovery_config=config)
    assert dry["state"] == "success", dry
    [plan] = dry["xcom"]
    assert (plan["dry_run"], nonzero(plan["totals"])) == (True, {"would_reprocess": 6,
                                                                 "would_dead_letter": 2})
    assert plan["report_path"] == f"{tmp_path}/reports/entries/run_id={plan['run_id']}"
    assert (pel(client), client.exists("{orders}:dlq")) == (ok + poison, 0)  # nothing changed
    assert [c["name"] for c in client.xinfo_consumers("orders", "billing")] == [
        b"worker-1-crashed"]  # nothing claimed
    later = stuck_entries(client, 3)  # not in the plan

    applied = airflow_run(airflow_env, "redis_stream_apply_plan",
                          {"plan": plan["report_path"]}, recovery_config=config)
    assert applied["state"] == "success", applied
    [summary] = applied["xcom"]
    assert (summary["dry_run"], summary["plan"], nonzero(summary["totals"])) == (
        False, plan["report_path"], {"reprocessed": 6, "dead_lettered": 2})
    assert pel(client) == later
    dead = client.xrange("{orders}:dlq")
    assert sorted(f[b"x-original-id"].decode() for _, f in dead) == sorted(poison)

    refused = airflow_run(airflow_env, "redis_stream_apply_plan",
                          {"plan": summary["report_path"]}, recovery_config=config)
    assert (refused["state"], refused["xcom"]) == ("failed", [])  # exit 2: a real run's report
    assert (pel(client), client.xlen("{orders}:dlq")) == (later, 2)


def test_apply_plan_dag_refuses_a_trigger_without_a_plan(airflow_env):
    for conf in ({}, {"plan": ""}, {"plan": "  "}):
        result = airflow_run(airflow_env, "redis_stream_apply_plan", conf)
        assert result["state"] == "not started", (conf, result)
        assert "plan" in result["error"], result["error"]
