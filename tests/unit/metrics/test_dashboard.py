"""The Grafana dashboard users import (conf/grafana-dashboard.json): valid JSON in
Grafana's dashboard form, every panel with a query, and every query naming only metrics
the jobs push (recovery.metrics.families) and labels they carry; the dead-letter panels'
data links, filled as Grafana fills them, open the console's page of that stream
(recovery.console.links) on a real server."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from urllib.parse import quote

from starlette.testclient import TestClient

from recovery.console.app import console_app
from recovery.metrics.families import PREFIX
from recovery.redis_io.dlq_names import labels
from recovery.testing.local_redis import LocalServer
from tests.support.console_tools import (
    DLQ,
    READER,
    READER_SECRET,
    SOURCES,
    logged_in,
    seed,
    state_for,
)
from tests.support.pushgateway import pushed_names

DASHBOARD = Path(__file__).resolve().parents[3] / "conf" / "grafana-dashboard.json"
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


def dead_letter_links() -> list[dict[str, object]]:
    board = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    return [link for p in board["panels"] if "dead_letter" in p["targets"][0]["expr"]
            for link in p["fieldConfig"]["defaults"].get("links", [])]


def grafana_url(template: str, console_url: str, labels: dict[str, str]) -> str:
    """`template` as Grafana fills a data link: ``${var}``, ``${__field.labels.x}`` and its
    ``:percentencode`` form (only what the dashboard's links use; anything else fails)."""
    def fill(match: re.Match[str]) -> str:
        name, form = match.group(1), match.group(2)
        value = console_url if name == "console_url" else labels[name.removeprefix(
            "__field.labels.")]
        assert form in (None, "percentencode"), form
        return quote(value, safe="") if form else value
    filled = re.sub(r"\$\{([\w.]+)(?::(\w+))?\}", fill, template)
    assert "$" not in filled, filled
    return filled


def test_the_console_url_variable_is_empty_by_default() -> None:
    board = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    found = [v for v in board["templating"]["list"] if v["name"] == "console_url"]
    assert [(v["type"], v["query"], v["current"]["value"]) for v in found] == [
        ("textbox", "", "")]


def test_the_dead_letter_panels_link_to_the_consoles_page_of_the_stream(
        redis_server: LocalServer) -> None:
    links = dead_letter_links()
    assert len(links) == 2 and all(link["targetBlank"] for link in links)
    client = redis_server.client()
    ids = seed(client, "orders", [{b"n": b"1"}, {b"n": b"2"}])
    seed(client, "payments", [{b"n": b"3"}])
    # The metrics' stream label of each dead-letter stream, as the jobs push it.
    label = labels([(s, DLQ[s]) for s in SOURCES])
    assert label == {DLQ["orders"]: "orders", DLQ["payments"]: "payments"}
    state = state_for(redis_server)
    try:
        browser, _ = logged_in(state, READER, READER_SECRET)
        for link in links:
            url = grafana_url(str(link["url"]), "http://testserver", {"stream": "orders"})
            reply = browser.get(url)
            assert reply.status_code == 303, reply.text
            assert reply.headers["location"] == "/browse?key=" + quote(DLQ["orders"], safe="")
            page = browser.get(reply.headers["location"])
            assert page.status_code == 200 and all(i in page.text for i in ids)
        other = grafana_url(str(links[0]["url"]), "http://testserver", {"stream": "(other)"})
        assert browser.get(other).status_code == 404
        # Logged out (or a SameSite=Strict cookie left behind by a cross-site click): one
        # reload from the console itself, then the login form.
        anonymous = TestClient(console_app(state), follow_redirects=False)
        hop = anonymous.get(url)
        assert hop.status_code == 200 and "/streams/orders?hop=1" in hop.text
        assert anonymous.get("/streams/orders?hop=1").headers["location"] == "/login"
    finally:
        state.close()
    assert client.xlen(DLQ["orders"]) == 2 and client.xlen(DLQ["payments"]) == 1


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
