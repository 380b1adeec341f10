"""Attacks on the monitoring of issue 61 (ATTACKS.md, "Dependencies that misbehave" and
"What the operator is told"), each through a command a user runs, against a real
Pushgateway, real Redis servers and, for the alert rules, the real ``promtool``. Each test
failed on the code it was written against."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from redis import Redis

from recovery.jobs.dead_letters import DeadLettersJob
from recovery.metrics.dead_letter_jobs import push_redrive_metrics
from recovery.metrics.families import PREFIX
from recovery.metrics.recovery_run import push_recovery_metrics
from recovery.redrive.run import RedriveSummary
from recovery.report.summary import RunSummary
from recovery.rows import RedriveUnit, UnitCounts
from recovery.settings.model import load_settings
from recovery.testing.local_redis import LocalServer, free_port
from tests.support.fault_tools import job_args, json_summary, spark_submit
from tests.support.pushgateway import LocalPushgateway, pushed
from tests.support.redirecting_gateway import RedirectingGateway

ROOT = Path(__file__).resolve().parents[3]
HANDLER = "handler.path=tests.support.handlers:verify_or_fail"


def merged_run(job: str, *args: str, timeout_s: float = 120) -> subprocess.CompletedProcess[str]:
    """``python jobs/<job>`` with stderr merged into stdout, as spark-submit's PythonRunner
    merges the driver's streams (tests/support/fault_tools.finished)."""
    return subprocess.run([sys.executable, str(ROOT / "jobs" / job), *args], cwd=ROOT,
                          env={**os.environ}, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=timeout_s)


def last_line_json(output: str) -> dict[str, object]:
    lines = output.strip().splitlines()
    assert lines, "nothing printed"
    try:
        return json.loads(lines[-1])  # type: ignore[no-any-return]
    except json.JSONDecodeError as exc:
        raise AssertionError(f"stdout's last line is not the JSON summary: {lines[-1]!r}"
                             ) from exc


def sets(*pairs: str) -> list[str]:
    return [a for s in pairs for a in ("--set", s)]


def seed_dead_letter(client: Redis, stream: str) -> None:
    client.xadd(stream, {"a": "1"})
    client.xadd(f"{{{stream}}}:dlq", {"a": "1"})


# --- the JSON line is not stdout's last under spark-submit -------------------------------

def test_a_refused_redrive_prints_its_json_last_with_the_streams_merged(tmp_path: Path) -> None:
    """A refused redrive (an empty ID range, exit 2) with metrics on: the metrics' INFO line
    ("metrics: pushed 2 series") came after the JSON error line, so where the streams are
    merged (spark-submit) stdout's last line was a log line, not the JSON."""
    with LocalPushgateway() as gateway:
        done = merged_run("redrive.py", *sets(
            "redis.url=redis://127.0.0.1:1", "streams.keys=s", f"report.path={tmp_path}",
            "redrive.from_id=5", "redrive.to_id=1", f"metrics.pushgateway_url={gateway.url}"))
    assert done.returncode == 2, done.stdout
    assert last_line_json(done.stdout)["exit_code"] == 2


@pytest.mark.slow
def test_spark_submit_with_redis_unreachable_prints_its_json_last(tmp_path: Path) -> None:
    """``spark-submit jobs/recover.py`` with Redis unreachable and a working Pushgateway:
    exit 1 and the JSON error line must be stdout's last (it was followed by
    ``INFO recovery.metrics.push: metrics: pushed 3 series ...``)."""
    with LocalPushgateway() as gateway:
        proc = spark_submit(job_args(f"redis://127.0.0.1:{free_port()}", tmp_path / "reports",
                                     ["s"], HANDLER, f"metrics.pushgateway_url={gateway.url}"),
                            tmp_path / "logs")
        code = proc.wait(timeout=240)
        assert pushed(gateway, PREFIX + "redis_up") == {"outcome=attempt": 0}
    stdout = (tmp_path / "logs" / "stdout").read_text(errors="replace")
    assert code == 1, stdout[-3000:]
    assert last_line_json(stdout)["exit_code"] == 1


# --- the dead-letter jobs: Redis unreachable, a refused dry run --------------------------

@pytest.mark.slow
def test_a_redrive_that_cannot_reach_redis_keeps_its_series_and_says_redis_down(
        redis_server: LocalServer, tmp_path: Path) -> None:
    """A good redrive, then one with Redis unreachable (exit 1): it replaced the redrive's
    run group (the dead-letter series of its streams gone) and pushed ``redis_up`` 1, the
    opposite of what happened; OPERATIONS "Monitoring": a run that never read Redis keeps
    the run group and pushes its attempt, ``redis_up`` 0."""
    seed_dead_letter(redis_server.client(), "atk-rd")
    with LocalPushgateway() as gateway:
        common = ("streams.keys=atk-rd", f"report.path={tmp_path}",
                  f"metrics.pushgateway_url={gateway.url}")
        good = merged_run("redrive.py", *sets(f"redis.url={redis_server.url}", *common))
        assert good.returncode == 0, good.stdout
        kept = pushed(gateway, PREFIX + "dead_letter_entries", "redrive")
        assert kept == {"stream=atk-rd": 1}, kept
        down = merged_run("redrive.py", *sets(f"redis.url=redis://127.0.0.1:{free_port()}",
                                              *common))
        assert down.returncode == 1, down.stdout
        assert pushed(gateway, PREFIX + "last_attempt_exit_code", "redrive") == {
            "outcome=attempt": 1}
        assert pushed(gateway, PREFIX + "redis_up", "redrive") == {"outcome=attempt": 0}
        assert pushed(gateway, PREFIX + "dead_letter_entries", "redrive") == kept


def test_a_refused_redrive_dry_run_pushes_under_the_dry_run_kind(tmp_path: Path) -> None:
    """``redrive --dry-run`` refused (exit 2) pushed its attempt under kind ``redrive``, the
    real redrive's group: an ad-hoc dry run's mistake became the real job's last attempt."""
    with LocalPushgateway() as gateway:
        done = merged_run("redrive.py", "--dry-run", *sets(
            "redis.url=redis://127.0.0.1:1", "streams.keys=s", f"report.path={tmp_path}",
            "redrive.from_id=5", "redrive.to_id=1", f"metrics.pushgateway_url={gateway.url}"))
        assert done.returncode == 2, done.stdout
        assert pushed(gateway, PREFIX + "last_attempt_exit_code", "redrive") == {}
        assert pushed(gateway, PREFIX + "last_attempt_exit_code", "redrive_dry_run") == {
            "outcome=attempt": 2}


# --- the metrics' own read of Redis after the run ----------------------------------------

def test_the_metrics_read_of_a_hung_redis_is_bounded_by_the_metrics_timeout(
        redis_server: LocalServer) -> None:
    """A run whose own after-run read failed (Redis hung at the end: ``CLIENT PAUSE``, a
    ``DEBUG SLEEP``, a proxy that stops forwarding) leaves ``summary.after`` unset; the
    metrics then read the hung server again, for (1 + retries) x ``redis.socket_timeout_s``
    (2 minutes at the default 30 s) on top of the run's own wait, whatever
    ``metrics.timeout_s`` says. Here: socket timeout 2 s, metrics timeout 1 s; it took
    9.5 s. The push itself still goes out (with what is known)."""
    client: Redis = redis_server.client()
    client.xadd("atk-hung", {"a": "1"})
    client.xgroup_create("atk-hung", "g", id="0")
    with LocalPushgateway() as gateway:
        settings = load_settings(None, [
            f"redis.url={redis_server.url}", "streams.keys=atk-hung", "redis.socket_timeout_s=2",
            "redis.connect_timeout_s=2", f"metrics.pushgateway_url={gateway.url}",
            "metrics.timeout_s=1"])
        summary = RunSummary("atk-hung-run")
        summary.units = [UnitCounts("atk-hung", "g")]
        client.execute_command("CLIENT", "PAUSE", 12_000, "ALL")  # ends by itself
        started = time.monotonic()
        entry = push_recovery_metrics(settings, summary, 0, time.time())
        took = time.monotonic() - started
        assert entry is not None and entry["pushed"] is True, entry
        assert str(entry["pending"]).startswith("not read"), entry
    assert took < 2 * settings.metrics.timeout_s + 1.5, took


# --- a gateway that redirects ------------------------------------------------------------

def test_a_redirected_push_neither_leaks_the_password_nor_counts_as_pushed(
        tmp_path: Path) -> None:
    """The gateway answers the attempt group's POST with a 302 to another host: urllib
    followed it as a GET, sending the basic-auth header (the metrics password) to that host,
    and the summary said ``pushed: true`` although the attempt was never stored. A push
    must not follow redirects: a redirect is a failed push (one WARNING, ``pushed`` false)."""
    password = "Wombat-77c1-redirect-pass"
    with RedirectingGateway() as gateway:
        done = subprocess.run(
            [sys.executable, str(ROOT / "jobs" / "redrive.py"), *sets(
                "redis.url=redis://127.0.0.1:1", "streams.keys=s", f"report.path={tmp_path}",
                "redrive.from_id=5", "redrive.to_id=1", f"metrics.pushgateway_url={gateway.url}",
                "metrics.username=pusher")],
            cwd=ROOT, env={**os.environ, "RECOVERY_METRICS__PASSWORD": password},
            capture_output=True, text=True, timeout=120)
        assert done.returncode == 2, done.stderr
        assert gateway.redirected >= 1, "the gateway never saw the POST"
        leaked = [(method, path) for method, path, headers in gateway.seen
                  if "Authorization" in headers or "authorization" in headers]
    assert leaked == [], f"the basic-auth header went to the redirect's host: {leaked}"
    assert password not in done.stdout + done.stderr
    assert last_line_json(done.stdout)["exit_code"] == 2
    assert gateway.seen == [], gateway.seen
    assert "redirect" in done.stderr.lower() or "302" in done.stderr, done.stderr[-2000:]


# --- the alert rules ---------------------------------------------------------------------

def test_the_rules_page_for_a_job_gone_silent_and_not_for_one_failure() -> None:
    """``promtool test rules tests/alerts/attack_alerts_test.yml``: (1) after a Pushgateway
    restart (in memory: every series gone) a scheduled job that stopped running fires
    nothing, ever; (2) after such a restart one failed run pages "has not succeeded for
    three schedules" at once, the deployment looking as if it never succeeded."""
    binary = shutil.which("promtool")
    assert binary, "no promtool: apt-get install prometheus"
    done = subprocess.run([binary, "test", "rules",
                           str(ROOT / "tests" / "alerts" / "attack_alerts_test.yml")],
                          capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.slow
def test_a_dead_letter_read_that_cannot_reach_redis_keeps_its_series(
        spark: SparkSession, redis_server: LocalServer, tmp_path: Path) -> None:
    """The dead-letter read's twin of the redrive case: Redis unreachable (exit 1) replaced
    its run group (the dead-letter series gone) and pushed ``redis_up`` 1."""
    seed_dead_letter(redis_server.client(), "atk-dl")
    with LocalPushgateway() as gateway:
        common = ["streams.keys=atk-dl", f"report.path={tmp_path}",
                  f"metrics.pushgateway_url={gateway.url}"]
        code, _ = json_summary(lambda: DeadLettersJob(lambda _: spark).main(
            sets(f"redis.url={redis_server.url}", *common)))
        assert code == 0
        kept = pushed(gateway, PREFIX + "dead_letter_entries", "dead_letters")
        assert kept == {"stream=atk-dl": 1}, kept
        code, down = json_summary(lambda: DeadLettersJob(lambda _: spark).main(
            sets(f"redis.url=redis://127.0.0.1:{free_port()}", *common)))
        assert code == 1, down
        assert pushed(gateway, PREFIX + "redis_up", "dead_letters") == {"outcome=attempt": 0}
        assert pushed(gateway, PREFIX + "dead_letter_entries", "dead_letters") == kept


# --- a failure that is not one of the job's own errors -----------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("job", ["recover.py", "dead_letters.py"])
def test_a_spark_session_that_cannot_start_still_ends_with_json_and_its_attempt(
        job: str, redis_server: LocalServer, tmp_path: Path) -> None:
    """``python jobs/<job>`` where Spark cannot start (no Java: ``JAVA_HOME`` names nothing):
    the PySparkRuntimeError was no RecoveryError, so the job died with a traceback, no
    ``error:`` line, no JSON line, and pushed nothing, not even its attempt: the failure was
    invisible to the attempt-based alerts. Expected: exit 1, one ``error:`` line, the JSON
    line last, the attempt pushed with exit code 1."""
    kind = job.removesuffix(".py")
    with LocalPushgateway() as gateway:
        done = subprocess.run(
            [sys.executable, str(ROOT / "jobs" / job), *sets(
                f"redis.url={redis_server.url}", "streams.keys=atk-nojvm",
                f"report.path={tmp_path}", "handler.path=recovery.handlers:example_handler",
                f"metrics.pushgateway_url={gateway.url}")],
            cwd=ROOT, env={**{k: v for k, v in os.environ.items() if k != "SPARK_HOME"},
                           "JAVA_HOME": str(tmp_path / "no-java"), "PATH": "/usr/bin:/bin"},
            capture_output=True, text=True, timeout=180)
        attempt = pushed(gateway, PREFIX + "last_attempt_exit_code", kind)
    assert done.returncode == 1, done.stderr[-3000:]
    assert done.stdout.strip(), f"no JSON line; stderr: {done.stderr[-600:]}"
    assert last_line_json(done.stdout)["exit_code"] == 1
    assert [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    assert attempt == {"outcome=attempt": 1}, attempt


def test_the_redrive_metrics_read_of_a_hung_redis_is_bounded_by_the_metrics_timeout(
        redis_server: LocalServer) -> None:
    """The redrive's metrics always read its dead-letter streams at the end (XLEN, XRANGE);
    with Redis hung there (``CLIENT PAUSE``) that read waited (1 + retries) x
    ``redis.socket_timeout_s`` whatever ``metrics.timeout_s`` says (here 2 s and 1 s: about
    9 s), and then nothing at all was pushed, not even the attempt: the read's
    RedisUnavailableError (no redis.RedisError) escaped into the push. The push must still
    go out, without the lengths, within the metrics' time."""
    client: Redis = redis_server.client()
    seed_dead_letter(client, "atk-rd-hung")
    with LocalPushgateway() as gateway:
        settings = load_settings(None, [
            f"redis.url={redis_server.url}", "streams.keys=atk-rd-hung",
            "redis.socket_timeout_s=2", "redis.connect_timeout_s=2",
            f"metrics.pushgateway_url={gateway.url}", "metrics.timeout_s=1"])
        summary = RedriveSummary("atk-rd-hung-run")
        summary.units = [RedriveUnit("atk-rd-hung", "{atk-rd-hung}:dlq", examined=1,
                                     left_in_dead_letter=1)]
        client.execute_command("CLIENT", "PAUSE", 12_000, "ALL")  # ends by itself
        started = time.monotonic()
        entry = push_redrive_metrics(settings, summary, 0, time.time())
        took = time.monotonic() - started
        assert entry is not None and entry["pushed"] is True, entry
    assert took < 2 * settings.metrics.timeout_s + 1.5, took
