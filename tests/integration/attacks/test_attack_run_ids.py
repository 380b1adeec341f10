"""Attacks on "a run ID is used once" (issue 60, parts 4 and 5; docs/GUARANTEES.md, "Run
IDs"): each test here failed on the code it was written against."""

from __future__ import annotations

import pytest
from redis import Redis

from recovery.driver.discovery import discover
from recovery.redis_io.redis_conn import RedisConn
from recovery.redis_io.run_ids import registration_key
from recovery.settings.model import load_settings, redis_params
from tests.support.fault_tools import (
    GROUP,
    JobResult,
    finished,
    handed_over,
    job_args,
    kill_tree,
    report_rows,
    rows_by_key,
    run_in_process,
    spark_submit,
    wait_until,
    write_control,
)
from tests.support.journal_rows_tools import seed_stream

SETTINGS = ("claim.min_idle_ms=1000",)


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_a_dry_run_with_the_run_id_of_a_running_run_is_refused(spark, redis_server, tmp_path):
    """A real run ``twin`` (spark-submit, ``local[2,2]``) has registered its ID and is
    handing over; a ``--dry-run --run-id twin`` started then is not checked against the
    registration (dry runs skip the Redis traces) and writes its plan into the same report
    partition: the real run's report is lost (its staging directory removed under it: exit
    1 after every entry was handed over and acked) or holds each entry twice. A given run ID
    with a trace is refused, whatever the kind of run: the partition holds each entry once."""
    client = redis_server.client()
    write_control(redis_server.url, delay_s=2)
    client.delete("test:handled")
    ids = seed_stream(client, "s", GROUP, 30)
    args = job_args(redis_server.url, tmp_path, ["s"], *SETTINGS, "claim.count=2",
                    run_id="twin")
    proc = spark_submit(args, tmp_path / "logs", master="local[2,2]")
    try:
        assert wait_until(lambda: client.exists(registration_key("recovery", "twin")) == 1,
                          proc, 240, "the real run's registration"), "the real run ended first"
        dry = run_in_process(spark, [*args, "--dry-run"])
        real = finished(proc, tmp_path / "logs", 300)
    finally:
        if proc.poll() is None:
            kill_tree(proc)
    rows = rows_by_key(report_rows(spark, tmp_path, "twin") or [])
    found = (dry.code, real.code, dry.summary.get("totals"),
             sorted({tuple(r["action"] for r in v) for v in rows.values()}), len(rows))
    assert dry.code == 2, ("the dry run was not refused", found)
    (line,) = dry.error_lines()
    assert "--run-id twin is taken" in line, line
    assert real.code == 0, real.stderr[-3000:]
    assert handed_over(client) == {("s", GROUP, i): 1 for i in ids}
    assert {k: [r["action"] for r in v] for k, v in rows.items()} == {
        ("s", GROUP, i): ["reprocessed"] for i in ids}


@pytest.mark.slow
@pytest.mark.parametrize("run_id", ["r[1]", "r*"])
def test_a_run_id_with_glob_characters_reads_its_own_report_only(spark, redis_server, tmp_path,
                                                                 run_id):
    """A run ID with glob characters (its split keys' SCAN escapes them) whose run fails its
    entries: the driver reads its report back for the summary's ``failed_errors``, and that
    read took the partition path as a Hadoop glob: ``r[1]`` matched no directory (exit 1,
    ``Path does not exist``, after every entry was handled, the registration left for a
    week), ``r*`` matched another run's partition (``r1``: its errors in this summary). The
    run reads its own partition, exits 0, names its own error only, deletes its
    registration."""
    client = redis_server.client()
    write_control(redis_server.url)
    client.delete("test:handled")
    other = seed_stream(client, "o", GROUP, 2, extra={i: {b"raise": b"1"} for i in range(2)})
    first = run_in_process(spark, job_args(redis_server.url, tmp_path, ["o"], *SETTINGS,
                                           run_id="r1"))
    assert first.code == 0 and first.summary["totals"]["failed"] == 2, first.stderr[-3000:]
    ids = seed_stream(client, "s", GROUP, 3, extra={i: {b"raise": b"1"} for i in range(3)})
    result = run_in_process(spark, job_args(redis_server.url, tmp_path, ["s"], *SETTINGS,
                                            run_id=run_id))
    assert result.code == 0, result.stderr[-3000:]
    assert result.summary["totals"]["failed"] == 3, result.summary
    assert [e["entries"] for e in result.summary["failed_errors"]] == [3], \
        result.summary["failed_errors"]
    assert client.keys("recovery:run:*") == [], "a finished run's registration is deleted"
    handled = handed_over(client)
    assert {k: n for k, n in handled.items() if k[0] == "s"} == {
        ("s", GROUP, i): 1 for i in ids}, handled
    assert len(other) == 2


def twin_started_in_discovery(spark, monkeypatch, tmp_path, argv: list[str],
                              twin: tuple[str, Redis, list[str], str]
                              ) -> tuple[JobResult, JobResult]:
    """Run `argv` in process, the interleaving forced: its discovery starts the twin run
    (spark-submit, ``local[2,2]``) and waits for the twin's registration of run ID ``twin``.
    `twin`: how the messages name the first run, the twin's server (where it registers),
    its arguments and its name. Both results, whatever their exit codes; a twin still
    running at the end is killed."""
    import recovery.driver.job as job

    first, twin_client, twin_argv, name = twin
    procs: list = []
    original = job.discover

    def discover_then_start_the_twin(*a, **k):  # the first run's discovery
        found = original(*a, **k)
        procs.append(spark_submit(twin_argv, tmp_path / "logs", master="local[2,2]"))
        wait_until(lambda: twin_client.exists(registration_key("recovery", "twin")) == 1,
                   procs[0], 240, f"{name}'s registration")
        return found

    monkeypatch.setattr(job, "discover", discover_then_start_the_twin)
    try:
        result = run_in_process(spark, argv)
        assert procs, f"the fault did not land: {first} never reached its discovery"
        return result, finished(procs[0], tmp_path / "logs", 300)
    finally:
        for proc in procs:
            if proc.poll() is None:
                kill_tree(proc)


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_a_dry_run_and_a_real_run_started_together_with_one_run_id_run_once(
        spark, redis_server, tmp_path, monkeypatch):
    """A ``--dry-run --run-id twin`` has passed its checks (no report partition, no
    registration: the real run has not started) when a real run ``twin`` starts
    (spark-submit, ``local[2,2]``): the real run finds no report partition either (the dry
    run has written nothing yet) and registers; the dry run, which never registers, then
    writes its plan into the same partition. Seen by hand with two spark-submits started a
    few seconds apart: the partition held each entry twice (``would_reprocess`` and
    ``reprocessed``), or the dry run's commit removed the real run's ``_staging`` and the
    real run exited 1 after handing over and acking every entry, with no report row for
    any of them. The interleaving is forced here: the dry run's discovery starts the real
    run and waits for its registration. Of two runs with one ID, one runs: the other is
    refused (exit 2), each entry is handed over once and is in the partition once."""
    client = redis_server.client()
    write_control(redis_server.url, delay_s=1)
    client.delete("test:handled")
    ids = seed_stream(client, "s", GROUP, 12)
    args = job_args(redis_server.url, tmp_path, ["s"], *SETTINGS, "claim.count=2",
                    run_id="twin")
    dry, real = twin_started_in_discovery(spark, monkeypatch, tmp_path, [*args, "--dry-run"],
                                          ("the dry run", client, args, "the real run"))
    rows = rows_by_key(report_rows(spark, tmp_path, "twin") or [])
    found = (dry.code, real.code, sorted({tuple(r["action"] for r in v) for v in rows.values()}),
             len(rows))
    assert sorted([dry.code, real.code]) == [0, 2], found
    assert all(len(v) == 1 for v in rows.values()), found
    assert set(handed_over(client).values()) <= {1}, handed_over(client)
    if real.code == 0:
        assert handed_over(client) == {("s", GROUP, i): 1 for i in ids}
        assert {k: [r["action"] for r in v] for k, v in rows.items()} == {
            ("s", GROUP, i): ["reprocessed"] for i in ids}


@pytest.mark.parametrize("journal_prefix", ["orders:", "recovery:journal:"])
def test_discovery_silences_only_names_the_job_makes(redis_server, tmp_path, journal_prefix):
    """``claim.journal_prefix`` is the user's to choose (docs/ACL.md: grant that pattern).
    Discovery left alone, without a word, every non-stream key that merely starts with it
    (or with the registration prefix, or holds ``:recovery-split:``): with ``orders:``, an
    application's hash ``orders:config`` that ``streams.match = "orders:*"`` selected was no
    longer listed as a skipped source, and the summary said ``ok``. Only the names the job
    makes (a journal is ``<journal prefix><consumer prefix>-<run id>-<part>``) are its own;
    another key under the prefix is still a skipped source."""
    client = redis_server.client()
    seed_stream(client, "orders:eu", GROUP, 2)
    client.hset("orders:config", "a", "1")
    client.set("recovery:journal:notes", "x")
    client.set("recovery:run:book", "x")
    client.set("orders:x:recovery-split:y", "x")
    own = f"{journal_prefix}recovery-KA-0"
    client.rpush(own, "run KA")
    settings = load_settings(None, [f"redis.url={redis_server.url}", "streams.match=*",
                                    f"claim.journal_prefix={journal_prefix}",
                                    f"report.path={tmp_path}"])
    job_conn = RedisConn.open(redis_params(settings))
    units, skipped = discover(job_conn, settings)
    job_conn.close()
    assert [(u.stream, u.pending) for u in units] == [("orders:eu", 2)]
    names = sorted(s.stream for s in skipped)
    assert own not in names, names
    assert "orders:config" in names, names


@pytest.mark.slow
def test_a_run_id_too_long_for_a_directory_name_is_refused_untouched(spark, redis_server,
                                                                     tmp_path):
    """``--run-id`` of 250 characters: ``run_id=<id>`` is longer than a file name may be
    (255 bytes), so the report partition cannot be made. The run registered the ID, then
    failed (exit 1, ``File name too long``) and left its registration for a week. A bad
    argument is refused before Redis is touched: exit 2, no key written."""
    client = redis_server.client()
    write_control(redis_server.url)
    client.delete("test:handled")
    seed_stream(client, "s", GROUP, 3)
    run_id = "L" * 250
    result = run_in_process(spark, job_args(redis_server.url, tmp_path, ["s"], *SETTINGS,
                                            run_id=run_id))
    assert result.code == 2, (result.code, result.stderr[-2000:])
    (line,) = result.error_lines()
    assert "--run-id" in line, line
    assert client.keys("recovery:*") == []
    assert handed_over(client) == {}


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_two_runs_with_one_run_id_on_two_servers_share_no_report_partition(
        spark, redis_server, tmp_path, monkeypatch):
    """One config (one ``report.path``) for two Redis servers, and one ``--run-id`` (an
    Airflow DAG per server: the same Airflow run ID, task ID and try give the same job run
    ID): each run registers the ID on its own server, so neither sees the other's
    registration, and both pass the report check before either has written. Run A (in
    process) is held in its discovery until run B (spark-submit, ``local[2,2]``, slow
    handler) has registered on the other server. Both then wrote into
    ``entries/run_id=twin``: one partition holding two runs' rows (or one run's report lost
    when the other's commit removed the shared ``_staging``). Of two runs with one ID and
    one report partition, one runs; the other is refused (exit 2)."""
    from tests.support.servers import start_server

    other = start_server("redis")
    try:
        client, client_b = redis_server.client(), other.client()
        write_control(redis_server.url, delay_s=1)
        client.delete("test:handled")
        ids_a = seed_stream(client, "a", GROUP, 6)
        ids_b = seed_stream(client_b, "b", GROUP, 6)
        args_a = job_args(redis_server.url, tmp_path, ["a"], *SETTINGS, "claim.count=2",
                          run_id="twin")
        args_b = job_args(other.url, tmp_path, ["b"], *SETTINGS, "claim.count=2",
                          run_id="twin")
        run_a, run_b = twin_started_in_discovery(spark, monkeypatch, tmp_path, args_a,
                                                 ("run A", client_b, args_b, "run B"))
        rows = rows_by_key(report_rows(spark, tmp_path, "twin") or [])
        found = (run_a.code, run_b.code, sorted({k[0] for k in rows}), len(rows))
        assert sorted([run_a.code, run_b.code]) == [0, 2], found
        ran = ids_a if run_a.code == 0 else ids_b
        stream = "a" if run_a.code == 0 else "b"
        assert {k: len(v) for k, v in rows.items()} == {(stream, GROUP, i): 1 for i in ran}
    finally:
        other.stop()
