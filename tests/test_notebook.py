"""notebooks/recovery.ipynb runs top to bottom (nbclient), so it cannot rot.

Its default path: it starts its own throwaway server (recovery.testing.local_redis), seeds
the demo backlog, draws its pictures, runs the job in its own Spark, and stops the server.
Pointed at a real server it touches only the streams its user selected, and without a
selection it refuses to run at all.
Needs the ``notebook`` extras (nbclient, nbformat, ipykernel, matplotlib).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from redis import Redis

from recovery.testing.backlog import seed_demo_backlog

pytestmark = pytest.mark.slow  # the notebook runs the job in its own Spark

nbclient = pytest.importorskip("nbclient", reason="needs the notebook extras: "
                               "pip install -e '.[notebook]'")
nbformat = pytest.importorskip("nbformat")
pytest.importorskip("ipykernel")
pytest.importorskip("matplotlib")

NOTEBOOK = Path(__file__).resolve().parent.parent / "notebooks" / "recovery.ipynb"
CHOICES = ("RECOVERY_NOTEBOOK_STREAM_KEYS", "RECOVERY_NOTEBOOK_STREAM_MATCH",
           "RECOVERY_NOTEBOOK_HANDLER", "RECOVERY_NOTEBOOK_CONFIG", "RECOVERY_STREAMS__KEYS",
           "RECOVERY_STREAMS__MATCH", "RECOVERY_HANDLER__PATH")
DEMO_STREAMS = ("orders", "payments", "shipments{eu}")
DEMO_GROUPS = ("billing", "analytics")


def execute(monkeypatch: pytest.MonkeyPatch, **env: str) -> nbformat.NotebookNode:
    """The notebook run top to bottom by a kernel that sees only the choices in `env`."""
    for name in CHOICES:
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("MPLBACKEND", "module://matplotlib_inline.backend_inline")
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nbclient.NotebookClient(nb, timeout=300, kernel_name="python3",
                            resources={"metadata": {"path": str(NOTEBOOK.parent)}}).execute()
    return nb


def pel_state(client: Redis) -> dict[tuple[str, str], list[tuple[bytes, bytes, int]]]:
    """Every demo group's PEL: (ID, owner, deliveries) per entry."""
    return {(s, g): [(r["message_id"], r["consumer"], r["times_delivered"])
                     for r in client.xpending_range(s, g, "-", "+", 10_000)]
            for s in DEMO_STREAMS for g in DEMO_GROUPS}


def tagged(nb: nbformat.NotebookNode, tag: str) -> nbformat.NotebookNode:
    return next(c for c in nb.cells if tag in c.get("metadata", {}).get("tags", []))


def last_json_line(cell: nbformat.NotebookNode) -> dict:
    printed = "".join(o.get("text", "") for o in cell.outputs)
    return json.loads(printed.strip().splitlines()[-1])  # type: ignore[no-any-return]


def test_notebook_runs_top_to_bottom_and_draws_four_pictures(monkeypatch):
    monkeypatch.delenv("RECOVERY_NOTEBOOK_REDIS_URL", raising=False)
    nb = execute(monkeypatch, RECOVERY_NOTEBOOK_PER_STREAM="200")  # small: the test stays fast

    images = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
              if "image/png" in o.get("data", {})]
    assert len(images) == 4  # delivery counts, pending age, outcomes, the trend
    plan, summary = (last_json_line(tagged(nb, tag)) for tag in ("dry-run", "real-run"))
    assert (plan["status"], plan["dry_run"], summary["status"]) == ("ok", True, "ok")
    assert summary["plan"] == plan["report_path"]  # the real run applied the reviewed plan
    # 3 streams x 2 groups; every 40th of the 150 stuck entries per group is poison (9 deliveries).
    assert summary["totals"]["dead_lettered"] == plan["totals"]["would_dead_letter"] == 3 * 2 * 4
    assert summary["totals"]["reprocessed"] > 0
    # The biggest cause (one stream, group and reason: 4 poison entries), redriven dry.
    redrive_plan = last_json_line(tagged(nb, "redrive-plan"))
    assert redrive_plan["dry_run"] is True
    assert (redrive_plan["totals"]["matched"], redrive_plan["totals"]["redriven"]) == (4, 0)
    assert os.environ.get("RECOVERY_NOTEBOOK_REDIS_URL") is None


def test_against_a_real_server_without_a_selection_it_refuses_and_touches_nothing(
        monkeypatch, redis_server):
    client = redis_server.client()
    seed_demo_backlog(client, per_stream=40)
    before, keys = pel_state(client), sorted(client.keys("*"))
    with pytest.raises(nbclient.exceptions.CellExecutionError,
                       match="nothing selects its streams: set STREAM_KEYS or STREAM_MATCH"):
        execute(monkeypatch, RECOVERY_NOTEBOOK_REDIS_URL=redis_server.url)
    assert pel_state(client) == before
    assert sorted(client.keys("*")) == keys, "no dead-letter stream, nothing added"


def test_against_a_real_server_it_touches_only_the_selected_streams(monkeypatch, redis_server):
    """STREAM_KEYS=orders and the example handler, named: only orders' groups are recovered."""
    client = redis_server.client()
    seed_demo_backlog(client, per_stream=200)
    before = pel_state(client)
    nb = execute(monkeypatch, RECOVERY_NOTEBOOK_REDIS_URL=redis_server.url,
                 RECOVERY_NOTEBOOK_STREAM_KEYS="orders",
                 RECOVERY_NOTEBOOK_HANDLER="recovery.handlers:example_handler")
    summary = last_json_line(tagged(nb, "real-run"))
    assert {u["stream"] for u in summary["units"]} == {"orders"}
    after = pel_state(client)
    assert {k: v for k, v in after.items() if k[0] != "orders"} == {
        k: v for k, v in before.items() if k[0] != "orders"}, "the other streams untouched"
    assert client.xlen("{orders}:dlq") == 2 * 4  # its poison entries, 4 per group
    assert not client.exists("{payments}:dlq", "{shipments{eu}}:dlq", "shipments{eu}:dlq")
