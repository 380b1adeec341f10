"""notebooks/recovery.ipynb runs top to bottom (nbclient), so it cannot rot.

It takes its default path: it starts its own throwaway server (recovery.testing.local_redis), seeds
the demo backlog, draws its pictures, runs the job in its own Spark, and stops the server.
Needs the ``notebook`` extras (nbclient, nbformat, ipykernel, matplotlib).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

nbclient = pytest.importorskip("nbclient", reason="needs the notebook extras: "
                               "pip install -e '.[notebook]'")
nbformat = pytest.importorskip("nbformat")
pytest.importorskip("ipykernel")
pytest.importorskip("matplotlib")

NOTEBOOK = Path(__file__).resolve().parent.parent / "notebooks" / "recovery.ipynb"


def tagged(nb: nbformat.NotebookNode, tag: str) -> nbformat.NotebookNode:
    return next(c for c in nb.cells if tag in c.get("metadata", {}).get("tags", []))


def last_json_line(cell: nbformat.NotebookNode) -> dict:
    printed = "".join(o.get("text", "") for o in cell.outputs)
    return json.loads(printed.strip().splitlines()[-1])  # type: ignore[no-any-return]


def test_notebook_runs_top_to_bottom_and_draws_four_pictures(monkeypatch):
    monkeypatch.delenv("RECOVERY_NOTEBOOK_REDIS_URL", raising=False)
    monkeypatch.setenv("RECOVERY_NOTEBOOK_PER_STREAM", "200")  # small: the test stays fast
    monkeypatch.setenv("MPLBACKEND", "module://matplotlib_inline.backend_inline")
    nb = nbformat.read(NOTEBOOK, as_version=4)

    nbclient.NotebookClient(nb, timeout=300, kernel_name="python3",
                            resources={"metadata": {"path": str(NOTEBOOK.parent)}}).execute()

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
