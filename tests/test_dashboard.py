"""The Grafana dashboard users import (conf/grafana-dashboard.json): valid JSON in
Grafana's dashboard form, every panel with a query, and every query naming only metrics
the jobs push (recovery.metrics.families) and labels they carry."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

from recovery.metrics.families import PREFIX
from tests.support.pushgateway import pushed_names

DASHBOARD = Path(__file__).resolve().parent.parent / "conf" / "grafana-dashboard.json"
KINDS = ("recover", "dead_letters", "redrive")  # each pushes dead-letter lengths
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


def panel(title_start: str) -> dict:
    board = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    [found] = [p for p in board["panels"] if p["title"].startswith(title_start)]
    return found


def test_a_dead_letter_stream_is_drawn_once_whatever_jobs_pushed_its_length(tmp_path: Path):
    """The recovery run, the dead-letter read and the redrive each push the length of a
    dead-letter stream under their own kind: the panel drew one stream three times. Its
    query, evaluated by promtool over the three series, gives one (the scheduled run's)."""
    binary = shutil.which("promtool")
    assert binary, "no promtool: apt-get install prometheus (.ci/run does)"
    expr = panel("Dead-letter stream length")["targets"][0]["expr"]
    expr = expr.replace("$job", "redis_stream_recovery").replace("$instance", ".*")
    series = [f"{PREFIX}dead_letter_entries{{job=\"redis_stream_recovery\",instance=\"a\","
              f"kind=\"{kind}\",stream=\"{{orders}}:dlq\"}}" for kind in KINDS]
    test = {"rule_files": [], "evaluation_interval": "1m", "tests": [{
        "interval": "1m",
        "input_series": [{"series": s, "values": "7x5"} for s in series],
        "promql_expr_test": [{"expr": expr, "eval_time": "2m", "exp_samples": [
            {"labels": series[0], "value": 7}]}]}]}
    (tmp_path / "panel_test.yml").write_text(json.dumps(test))  # JSON is YAML
    done = subprocess.run([binary, "test", "rules", str(tmp_path / "panel_test.yml")],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr


def test_run_status_and_seconds_are_on_axes_of_their_own():
    """0/1 and seconds shared one axis (a 40 s run flattened the status to a line at 0): the
    duration series is drawn on a right axis in seconds."""
    found = panel("Run status and duration")
    legends = {t["legendFormat"]: t["expr"] for t in found["targets"]}
    [seconds] = [legend for legend, expr in legends.items() if "_seconds" in expr]
    [override] = [o for o in found["fieldConfig"]["overrides"]
                  if o["matcher"] == {"id": "byName", "options": seconds}]
    properties = {p["id"]: p["value"] for p in override["properties"]}
    assert properties["unit"] == "s" and properties["custom.axisPlacement"] == "right"
    assert found["fieldConfig"]["defaults"]["unit"] != "s"
