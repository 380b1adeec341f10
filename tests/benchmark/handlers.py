"""The benchmark's slow handler: every message takes as long as a service call would.

The job loads it by ``handler.path = "tests.benchmark.handlers:slow_service"`` on its
executors, the loops call it in their own process. Its delay per message, in milliseconds,
comes from the environment variable ``BENCH_HANDLER_DELAY_MS`` (not ``RECOVERY_...``: that
prefix is the job's own settings), which the harness sets in the process environment of the
loops and of spark-submit, and as ``spark.executorEnv.BENCH_HANDLER_DELAY_MS`` for executors
launched apart from the driver. A call without it raises, so its batch fails, its entries
stay pending and the run's verification fails: a delay that did not reach a worker cannot
pass for a fast handler.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping

from recovery.handlers import Message, noop

DELAY_ENV = "BENCH_HANDLER_DELAY_MS"
SLOW_PATH = "tests.benchmark.handlers:slow_service"
NOOP_PATH = "recovery.handlers:noop"

Handler = Callable[[list[Message]], list[bool]]  # both of these return bools only


def delay_ms() -> float:
    """The per-message delay the environment sets (ms). Raises RuntimeError when it is unset
    or not a number >= 0."""
    value = os.environ.get(DELAY_ENV)
    try:
        delay = float(value) if value is not None else -1.0
    except ValueError:
        delay = -1.0
    if delay < 0:
        raise RuntimeError(f"{DELAY_ENV}={value!r}: the slow handler needs a delay in ms >= 0 "
                           "in its environment (spark.executorEnv for executors)")
    return delay


def slow_service(messages: list[Message]) -> list[bool]:
    """Acks every message after ``BENCH_HANDLER_DELAY_MS`` ms per message: one sleep for
    the batch, as long as one service call per message would take in turn (many short
    sleeps would each oversleep by the timer's slack)."""
    time.sleep(delay_ms() * len(messages) / 1000)
    return [True] * len(messages)


def handler_path(delay: float) -> str:
    """The job's ``handler.path`` for a delay per message (ms): the no-op handler for 0."""
    return SLOW_PATH if delay > 0 else NOOP_PATH


def handler_env(base: Mapping[str, str], delay: float) -> dict[str, str]:
    """`base` with the slow handler's `delay` ms per message, or without any (0: a value
    inherited from the caller's shell must not slow the loops down unannounced)."""
    env = {k: v for k, v in base.items() if k != DELAY_ENV}
    return {**env, DELAY_ENV: f"{delay:g}"} if delay > 0 else env


def from_environment() -> Handler:
    """The loops' handler: the slow one when ``BENCH_HANDLER_DELAY_MS`` is set, else the
    no-op handler (as the job's :func:`handler_path`)."""
    return slow_service if DELAY_ENV in os.environ else noop
