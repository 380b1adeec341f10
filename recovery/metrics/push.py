"""The push to a Prometheus Pushgateway, which never changes a run's outcome: a push that
fails (the Pushgateway down, a wrong URL, refused credentials, slower than
``metrics.timeout_s`` in all) is one WARNING line and a ``metrics`` entry in the JSON summary
saying so.

Three groups per grouping key (``job``, ``instance``, ``kind``): the run's group, replaced
whole (PUT) by each run that read Redis (a unit gone since the last run leaves no stale
series), and kept by a run that never did (refused, Redis unreachable), so the last known
per-stream state stays; the same key plus ``outcome="success"``, replaced only by a run
that succeeded, holding ``redis_stream_recovery_last_success_timestamp_seconds``; and the
same key plus ``outcome="attempt"``, added to (POST) by every run: its end, its exit code
and, when known, whether it could read Redis."""

from __future__ import annotations

import base64
import logging
import threading
import time
import urllib.request
from collections.abc import Callable
from typing import Any

from prometheus_client import CollectorRegistry, push_to_gateway, pushadd_to_gateway

from recovery.metrics.families import (
    RunFacts,
    attempt_registry,
    run_registry,
    success_registry,
)
from recovery.settings.metrics import MetricsSettings

log = logging.getLogger(__name__)


def grouping_key(metrics: MetricsSettings, kind: str) -> dict[str, str]:
    """The labels (besides ``job``) that name a run's group on the Pushgateway: the
    deployment (``metrics.instance``) and the job's kind (``recover``, ``recover_dry_run``,
    ...), so neither another deployment nor a dry run overwrites this one's metrics."""
    return {"instance": metrics.instance, "kind": kind}


def push_run(metrics: MetricsSettings, kind: str, facts_of: Callable[[], RunFacts] | None,
             exit_code: int, redis_up: int | None = None) -> dict[str, Any]:
    """Push the metrics of one run of a job of `kind`: the run group (unless `facts_of` is
    None: a run that never read Redis keeps the last one), the success group when
    `exit_code` is 0, and the attempt group (`redis_up`: 1, 0 or None, unknown). `facts_of`
    gathers the facts (it may read Redis). Returns the summary's ``metrics`` entry; never
    raises: whatever fails here, the run stands."""
    try:
        run = None if facts_of is None else run_registry(facts_of(), metrics.max_units)
        return push_metrics(metrics, kind, run,
                            success_registry(time.time()) if exit_code == 0 else None,
                            attempt_registry(time.time(), exit_code, redis_up))
    except Exception as exc:  # metrics never change a run's outcome
        entry = {"pushed": False, "url": metrics.pushgateway_url, "error": describe(exc)}
        log.warning("metrics: not pushed (%s); the run's outcome and exit code stand",
                    entry["error"])
        return entry


def push_metrics(metrics: MetricsSettings, kind: str, run: CollectorRegistry | None,
                 success: CollectorRegistry | None,
                 attempt: CollectorRegistry | None = None) -> dict[str, Any]:
    """Push `run` to the run's group (None: keep it), and, if given, `success` to the
    success group and `attempt` to the attempt group (POST), all within
    ``metrics.timeout_s``. Returns the summary's ``metrics`` entry: ``pushed`` (bool),
    ``url``, ``job``, ``grouping_key``, ``run_group`` (``replaced`` or ``kept``), ``series``
    (samples pushed) and, when the push failed, ``error``. Never raises for a failed push."""
    url = str(metrics.pushgateway_url)
    key = grouping_key(metrics, kind)
    groups = [(run, key, push_to_gateway), (success, {**key, "outcome": "success"},
                                             push_to_gateway),
              (attempt, {**key, "outcome": "attempt"}, pushadd_to_gateway)]
    pushes = [(registry, k, how) for registry, k, how in groups if registry is not None]
    entry: dict[str, Any] = {"pushed": False, "url": url, "job": metrics.job,
                             "grouping_key": key,
                             "run_group": "kept" if run is None else "replaced",
                             "series": sum(series_count(r) for r, _, _ in pushes)}
    try:
        within_deadline(lambda: _push_all(metrics, url, pushes), metrics.timeout_s)
    except Exception as exc:  # any failure of the push: the run stands
        entry["error"] = describe(exc)
        log.warning("metrics: push to %s failed (%s); the run's outcome and exit code stand",
                    url, entry["error"])
        return entry
    entry["pushed"] = True
    log.info("metrics: pushed %d series to %s (job %s, %s)", entry["series"], url,
             metrics.job, ", ".join(f"{k}={v}" for k, v in key.items()))
    return entry


def _push_all(metrics: MetricsSettings, url: str,
              pushes: list[tuple[CollectorRegistry, dict[str, str], Callable[..., None]]]
              ) -> None:
    """Push each registry to its group (PUT or POST: `how`), in order (no logging: this
    runs in the push thread, which may outlive the deadline)."""
    for registry, key, how in pushes:
        how(url, job=metrics.job, registry=registry, grouping_key=key,
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


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """Never follow a redirect: urllib would turn a POST into a GET to the new location,
    with every header of the push (the basic-auth one too, to whatever host the gateway
    names), and report success although nothing was stored. A redirect is a failed push
    (HTTPError 3xx)."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


def _handler(metrics: MetricsSettings) -> Any:
    """prometheus_client's request handler: a PUT or POST that follows no redirect, with
    basic auth when a user is set (the password from the settings, which read it from the
    environment or a file)."""
    auth: list[tuple[str, str]] = []
    if metrics.username is not None:
        password = metrics.password.get_secret_value() if metrics.password else ""
        token = base64.b64encode(f"{metrics.username}:{password}".encode()).decode()
        auth = [("Authorization", f"Basic {token}")]

    def handler(url: str, method: str, timeout: float | None, headers: list[tuple[str, str]],
                data: bytes) -> Callable[[], None]:
        def handle() -> None:
            request = urllib.request.Request(url, data=data, method=method)
            for name, value in [*headers, *auth]:
                request.add_header(name, value)
            opener = urllib.request.build_opener(_NoRedirect)
            with opener.open(request, timeout=timeout) as reply:
                if reply.status >= 300:
                    raise OSError(f"error talking to pushgateway: {reply.status} "
                                  f"{reply.reason}")

        return handle

    return handler


def describe(exc: Exception) -> str:
    """A failed push in a few words (the class and its message: neither holds the
    password, which only ever travels in a request header)."""
    return f"{type(exc).__name__}: {exc}".strip()


def series_count(registry: CollectorRegistry) -> int:
    """How many samples (series) `registry` holds."""
    return sum(len(family.samples) for family in registry.collect())
