"""The Grafana dashboard users import (conf/grafana-dashboard.json): valid JSON in
Grafana's dashboard form, every panel with a query, and every query naming only metrics
the jobs push (recovery.metrics.families) and labels they carry."""

from __future__ import annotations

import json
import re
from pathlib import Path

from recovery.metrics.families import PREFIX
from tests.support.pushgateway import pushed_names

DASHBOARD = Path(__file__).resolve().parent.parent / "conf" / "grafana-dashboard.json"
LABELS = {"job", "instance", "kind", "stream", "group", "action", "status", "outcome",
          "bucket"}


def queries() -> list[str]:
    board = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    variables = [v["query"] for v in board["templating"]["list"] if v["type"] == "query"]
    return [t["expr"] for p in board["panels"] for t in p["targets"]] + variables


def test_the_dashboard_is_grafana_json_with_a_query_per_panel() -> None:
    board = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    assert board["uid"] and board["title"] and board["panels"]
    assert all(p["targets"] and all(t["expr"] for t in p["targets"]) for p in board["panels"])
    assert len({p["id"] for p in board["panels"]}) == len(board["panels"])


def test_the_dashboard_names_only_what_the_jobs_push() -> None:
    named = {name for q in queries() for name in re.findall(rf"\b{PREFIX}\w+", q)}
    assert named and named <= pushed_names(), named - pushed_names()
    labels = {label for q in queries()
              for label in re.findall(r"(?:by \(|[{,]\s*)(\w+)\s*(?:=~|=|,|\))", q)}
    assert labels <= LABELS, labels - LABELS
