"""The push to a Prometheus Pushgateway, which never changes a run's outcome: a push that
fails (the Pushgateway down, a wrong URL, refused credentials) is one WARNING line and a
``metrics`` entry in the JSON summary saying so.

Two groups per grouping key (``job``, ``instance``, ``kind``), both replaced whole (PUT) by
each push: the run's group, pushed by every run (a unit gone since the last run leaves no
stale series); and, pushed only by a run that succeeded, the same key plus
``outcome="success"`` holding ``redis_stream_recovery_last_success_timestamp_seconds``, so a
failed run never erases when the job last succeeded."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from prometheus_client import CollectorRegistry, push_to_gateway
from prometheus_client.exposition import basic_auth_handler, default_handler

from recovery.metrics.families import RunFacts, run_registry, success_registry
from recovery.settings.metrics import MetricsSettings

log = logging.getLogger(__name__)


def grouping_key(metrics: MetricsSettings, kind: str) -> dict[str, str]:
    """The labels (besides ``job``) that name a run's group on the Pushgateway: the
    deployment (``metrics.instance``) and the job's kind (``recover``, ``recover_dry_run``,
    ...), so neither another deployment nor a dry run overwrites this one's metrics."""
    return {"instance": metrics.instance, "kind": kind}


def push_run(metrics: MetricsSettings, kind: str, facts_of: Callable[[], RunFacts],
             exit_code: int) -> dict[str, Any]:
    """Push the metrics of one run of a job of `kind`: the run group, and the success group
    when `exit_code` is 0. `facts_of` gathers the facts (it may read Redis). Returns the
    summary's ``metrics`` entry; never raises: whatever fails here, the run stands."""
    try:
        facts = facts_of()
        return push_metrics(metrics, kind, run_registry(facts, metrics.max_units),
                            success_registry(time.time()) if exit_code == 0 else None)
    except Exception as exc:  # metrics never change a run's outcome
        entry = {"pushed": False, "url": metrics.pushgateway_url, "error": describe(exc)}
        log.warning("metrics: not pushed (%s); the run's outcome and exit code stand",
                    entry["error"])
        return entry


def push_metrics(metrics: MetricsSettings, kind: str, run: CollectorRegistry,
                 success: CollectorRegistry | None) -> dict[str, Any]:
    """Push `run` to the run's group and, if given, `success` to the success group.
    Returns the summary's ``metrics`` entry: ``pushed`` (bool), ``url``, ``job``,
    ``grouping_key``, ``series`` (samples pushed) and, when the push failed, ``error``.
    Never raises for a failed push."""
    url = str(metrics.pushgateway_url)
    key = grouping_key(metrics, kind)
    entry: dict[str, Any] = {"pushed": False, "url": url, "job": metrics.job,
                             "grouping_key": key, "series": series_count(run)}
    pushes = [(run, key)]
    if success is not None:
        pushes.append((success, {**key, "outcome": "success"}))
    try:
        within_deadline(lambda: _push_all(metrics, url, pushes), metrics.timeout_s)
    except Exception as exc:  # any failure of the push: the run stands
        entry["error"] = describe(exc)
        log.warning("metrics: push to %s failed (%s); the run's outcome and exit code stand",
                    url, entry["error"])
        return entry
    if success is not None:
        entry["series"] += series_count(success)
    entry["pushed"] = True
    log.info("metrics: pushed %d series to %s (job %s, %s)", entry["series"], url,
             metrics.job, ", ".join(f"{k}={v}" for k, v in key.items()))
    return entry


def _push_all(metrics: MetricsSettings, url: str,
              pushes: list[tuple[CollectorRegistry, dict[str, str]]]) -> None:
    """PUT each registry to its group, in order (no logging: this runs in the push thread,
    which may outlive the deadline)."""
    for registry, key in pushes:
        push_to_gateway(url, job=metrics.job, registry=registry, grouping_key=key,
                        timeout=metrics.timeout_s, handler=_handler(metrics))


def within_deadline(call: Callable[[], None], timeout_s: float) -> None:
    """Run `call` in a daemon thread and wait at most `timeout_s` for it, from connect to
    last byte: urllib's timeout bounds each socket operation only, so a gateway that sends
    one byte a second would hold the push (and the job) forever. Raises TimeoutError past
    the deadline (the thread is abandoned: a daemon, it never keeps the process alive), or
    what `call` raised."""
    failure: list[BaseException] = []

    def target() -> None:
        try:
            call()
        except BaseException as exc:  # handed to the caller's thread
            failure.append(exc)

    thread = threading.Thread(target=target, name="metrics-push", daemon=True)
    thread.start()
    thread.join(timeout_s)
    if thread.is_alive():
        raise TimeoutError(f"not finished within metrics.timeout_s={timeout_s:g} s")
    if failure:
        raise failure[0]


def _handler(metrics: MetricsSettings) -> Any:
    """prometheus_client's request handler: basic auth when a user is set (the password
    from the settings, which read it from the environment or a file), else the default."""
    if metrics.username is None:
        return default_handler
    username = metrics.username
    password = metrics.password.get_secret_value() if metrics.password else ""

    def handler(url: str, method: str, timeout: float | None, headers: list[tuple[str, str]],
                data: bytes) -> Any:
        return basic_auth_handler(url, method, timeout, headers, data, username, password)

    return handler


def describe(exc: Exception) -> str:
    """A failed push in a few words (the class and its message: neither holds the
    password, which only ever travels in a request header)."""
    return f"{type(exc).__name__}: {exc}".strip()


def series_count(registry: CollectorRegistry) -> int:
    """How many samples (series) `registry` holds."""
    return sum(len(family.samples) for family in registry.collect())
