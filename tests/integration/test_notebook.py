"""notebooks/recovery.ipynb runs top to bottom (nbclient), so it cannot rot.

Its default path: it starts its own throwaway server (recovery.testing.local_redis), seeds
the demo backlog, draws its pictures, runs the job in its own Spark, and stops the server.
Pointed at a real server it touches only the streams its user selected, and without a
selection it refuses to run at all. With a config file the file's limits and report path
are the run's (the notebook adds none of its own), and the real run waits for its switch
(RECOVERY_NOTEBOOK_REAL_RUN): one sitting from the checkout without it, the next, switched,
from a kernel that has only the installed wheel (one Spark start fewer than two tests).
The checkout's sittings share one kernel (``kernel``, module-scoped), each top to bottom after
``%reset -f``, so its first Spark session's JVM serves them all: two JVM starts for the
module (the checkout's and the wheel's), not four.
Needs the ``notebook`` extras (nbclient, nbformat, ipykernel, matplotlib).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from redis import Redis

from recovery.testing.backlog import make_stuck, seed_demo_backlog

# The notebook runs the job in its own Spark; its sittings share one kernel (on one worker).
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("notebook")]

nbclient = pytest.importorskip("nbclient", reason="needs the notebook extras: "
                               "pip install -e '.[notebook]'")
nbformat = pytest.importorskip("nbformat")
pytest.importorskip("ipykernel")
pytest.importorskip("matplotlib")

NOTEBOOK = Path(__file__).resolve().parents[2] / "notebooks" / "recovery.ipynb"
RESOURCES = {"metadata": {"path": str(NOTEBOOK.parent)}}  # the kernel's working directory
CHOICES = ("RECOVERY_NOTEBOOK_STREAM_KEYS", "RECOVERY_NOTEBOOK_STREAM_MATCH",
           "RECOVERY_NOTEBOOK_HANDLER", "RECOVERY_NOTEBOOK_CONFIG", "RECOVERY_NOTEBOOK_REAL_RUN",
           "RECOVERY_NOTEBOOK_REDIS_URL", "RECOVERY_STREAMS__KEYS", "RECOVERY_STREAMS__MATCH",
           "RECOVERY_HANDLER__PATH", "RECOVERY_REPORT__PATH")
DEMO_STREAMS = ("orders", "payments", "shipments{eu}")
DEMO_GROUPS = ("billing", "analytics")


class Kernel:
    """One Jupyter kernel (`name`) that runs the notebook sitting after sitting, as a user
    re-runs it: each sitting runs every cell top to bottom after ``%reset -f`` (no variable of
    the last sitting is left), so the JVM its first Spark session started serves the next
    sittings' sessions (one JVM start per kernel, not one per sitting)."""

    def __init__(self, name: str = "python3", drop: tuple[str, ...] = ()) -> None:
        self.starter = nbclient.NotebookClient(nbformat.v4.new_notebook(), kernel_name=name,
                                               resources=RESOURCES)
        self.km = self.starter.create_kernel_manager()
        env = {k: v for k, v in os.environ.items() if k not in (*CHOICES, *drop)}
        self.starter.start_new_kernel(
            env={**env, "MPLBACKEND": "module://matplotlib_inline.backend_inline"})

    def sitting(self, **env: str) -> nbformat.NotebookNode:
        """The notebook run top to bottom by this kernel, which sees only the choices in
        `env`; its last cell added here prints where ``recovery`` was imported from."""
        nb = nbformat.read(NOTEBOOK, as_version=4)
        nb.cells.insert(0, nbformat.v4.new_code_cell(
            "%reset -f\nimport os, sys\n"
            "if 'pyspark' in sys.modules:  # a failed sitting's session\n"
            "    from pyspark.sql import SparkSession\n"
            "    if SparkSession.getActiveSession() is not None:\n"
            "        SparkSession.getActiveSession().stop()\n"
            f"for name in {CHOICES!r}:\n    os.environ.pop(name, None)\n"
            f"os.environ.update({env!r})\n%reset -f"))
        nb.cells.append(nbformat.v4.new_code_cell("print(recovery.__file__)",
                                                  metadata={"tags": ["imported-from"]}))
        client = nbclient.NotebookClient(nb, km=self.km, timeout=300, resources=RESOURCES)
        try:
            client.execute()
        finally:
            if client.kc is not None:
                client.kc.stop_channels()
        return nb

    def stop(self) -> None:
        self.starter._cleanup_kernel()


@pytest.fixture(scope="module")
def kernel() -> Iterator[Kernel]:
    """The checkout's kernel, shared by the module's sittings (its first Spark session
    starts the one JVM)."""
    started = Kernel()
    yield started
    started.stop()


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


def test_notebook_runs_top_to_bottom_and_draws_four_pictures(kernel):
    nb = kernel.sitting(RECOVERY_NOTEBOOK_PER_STREAM="200",  # small: the test stays fast
                        RECOVERY_NOTEBOOK_REAL_RUN="1")
    assert "started a throwaway" in cell_text(nb.cells[4])  # no URL, no config: the demo

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


def test_against_a_real_server_without_a_selection_it_refuses_and_touches_nothing(
        kernel, redis_server):
    client = redis_server.client()
    seed_demo_backlog(client, per_stream=40)
    before, keys = pel_state(client), sorted(client.keys("*"))
    with pytest.raises(nbclient.exceptions.CellExecutionError,
                       match="nothing selects its streams: set STREAM_KEYS or STREAM_MATCH"):
        kernel.sitting(RECOVERY_NOTEBOOK_REDIS_URL=redis_server.url)
    assert pel_state(client) == before
    assert sorted(client.keys("*")) == keys, "no dead-letter stream, nothing added"


def test_against_a_real_server_it_touches_only_the_selected_streams(kernel, redis_server):
    """STREAM_KEYS=orders and the example handler, named: only orders' groups are recovered."""
    client = redis_server.client()
    seed_demo_backlog(client, per_stream=200)
    before = pel_state(client)
    nb = kernel.sitting(RECOVERY_NOTEBOOK_REDIS_URL=redis_server.url,
                        RECOVERY_NOTEBOOK_STREAM_KEYS="orders",
                        RECOVERY_NOTEBOOK_HANDLER="recovery.handlers:example_handler",
                        RECOVERY_NOTEBOOK_REAL_RUN="1")
    summary = last_json_line(tagged(nb, "real-run"))
    assert {u["stream"] for u in summary["units"]} == {"orders"}
    after = pel_state(client)
    assert {k: v for k, v in after.items() if k[0] != "orders"} == {
        k: v for k, v in before.items() if k[0] != "orders"}, "the other streams untouched"
    assert client.xlen("{orders}:dlq") == 2 * 4  # its poison entries, 4 per group
    assert not client.exists("{payments}:dlq", "{shipments{eu}}:dlq", "shipments{eu}:dlq")


def seed_with_recent_repeats(client: Redis) -> list[bytes]:
    """The demo backlog, plus 3 entries of orders/billing delivered 7 times and idle 5 min:
    claimable (and over the limit) under the notebook's old built-in 60000 ms and 5, not
    under the user's 600000 ms and 10. Returns their IDs."""
    seed_demo_backlog(client, per_stream=200)
    live = [r["message_id"] for r in client.xpending_range(
        "orders", "billing", "-", "+", 10_000, consumername="worker-2-live")][:3]
    make_stuck(client, "orders", "billing", "worker-2-live", live, idle_ms=300_000,
               delivery_count=7)
    return live


def user_config(tmp_path: Path, url: str) -> Path:
    conf = tmp_path / "nb.toml"
    conf.write_text(f'[redis]\nurl = "{url}"\n[streams]\nkeys = ["orders"]\n'
                    "[claim]\nmin_idle_ms = 600000\nmax_deliveries = 10\n"
                    '[handler]\npath = "recovery.handlers:example_handler"\n'
                    f'[report]\npath = "{tmp_path / "reports"}"\n')
    return conf


def cell_text(cell: nbformat.NotebookNode) -> str:
    return "".join(o.get("text", "") + o.get("data", {}).get("text/plain", "")
                   for o in cell.outputs)


def assert_the_users_limits_held(client: Redis, recent: list[bytes],
                                 summary: dict) -> None:
    """A real run under max_deliveries 10 and min_idle_ms 600000: the entries delivered 9
    times (10 with this claim) go to the handler, not to a dead-letter stream; the
    5-minute-idle ones are not claimed; the others were handled."""
    assert summary["status"] == "ok" and summary["totals"]["reprocessed"] > 0
    assert summary["totals"]["dead_lettered"] == 0
    assert not client.exists("{orders}:dlq"), "nothing dead-lettered under the user's limit"
    rows = {r["message_id"]: r for r in client.xpending_range("orders", "billing", "-", "+",
                                                              10_000)}
    assert [(rows[i]["consumer"], rows[i]["times_delivered"]) for i in recent] == [
        (b"worker-2-live", 7)] * 3, "idle 5 min < the user's min_idle_ms: not claimed"


def wheel_kernel(python: str, where: Path, monkeypatch: pytest.MonkeyPatch) -> Kernel:
    """A Jupyter kernel of `python`, which has the installed wheel and the dependencies (seen
    through a .pth), not the checkout (without conftest's PYTHONPATH and PYSPARK_PYTHON)."""
    spec = where / "jupyter" / "kernels" / "recovery-wheel"
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [python, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "recovery from the wheel", "language": "python"}))
    monkeypatch.setenv("JUPYTER_PATH", str(where / "jupyter"))
    return Kernel("recovery-wheel", drop=("PYTHONPATH", "PYSPARK_PYTHON"))


def test_with_a_config_file_the_users_limits_win_and_the_real_run_waits_for_its_switch(
        kernel, monkeypatch, redis_server, tmp_path, wheel_python):
    """Two sittings with the user's config file. The first ("Run All" from the checkout, no
    switch) only plans, under the file's limits, into the file's report.path, and changes
    nothing. The second, with the switch, from a kernel that has only the installed wheel
    (conftest's ``wheel_python``), imports ``recovery`` from the wheel, recovers under the
    file's limits, and its trend reads the first sitting's plan from report.path. Then that
    kernel without config or URL refuses the throwaway demo server, a checkout's."""
    client = redis_server.client()
    recent = seed_with_recent_repeats(client)
    conf = user_config(tmp_path, redis_server.url)
    before, keys = pel_state(client), sorted(client.keys("*"))

    nb = kernel.sitting(RECOVERY_NOTEBOOK_CONFIG=str(conf))  # "Run All", no switch
    first_plan = last_json_line(tagged(nb, "dry-run"))
    assert first_plan["totals"]["would_dead_letter"] == 0  # 5 and 60000 would: 11
    assert first_plan["report_path"].startswith(str(tmp_path / "reports"))
    assert "REAL_RUN is False" in cell_text(tagged(nb, "real-run"))
    assert pel_state(client) == before, "without the switch nothing is claimed"
    assert sorted(client.keys("*")) == keys

    wheel = wheel_kernel(wheel_python, tmp_path, monkeypatch)
    try:
        nb = wheel.sitting(RECOVERY_NOTEBOOK_CONFIG=str(conf), RECOVERY_NOTEBOOK_REAL_RUN="1")
        imported_from = Path(cell_text(tagged(nb, "imported-from")).strip())
        assert imported_from.is_relative_to(Path(wheel_python).parent.parent), imported_from
        assert_the_users_limits_held(client, recent, last_json_line(tagged(nb, "real-run")))
        # The trend reads the config's report.path: the first sitting's dry run is in it.
        assert first_plan["run_id"] in cell_text(tagged(nb, "trend"))

        # No config, no URL: the throwaway demo server is a checkout's, and says so.
        with pytest.raises(nbclient.exceptions.CellExecutionError,
                           match="the throwaway demo server needs a checkout"):
            wheel.sitting()
    finally:
        wheel.stop()
