"""The client's retry policy, counting its retries: a command retried after its reply was
lost (a timeout, the bound of ``recovery.redis_io.deadline``, a reset) may have run on the
server already, so a caller that counts what a command did (the redrive's moves) must know
a retry happened to say its count may be short."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any, TypeVar

import redis
from redis.backoff import AbstractBackoff
from redis.retry import Retry

T = TypeVar("T")


class CountingRetry(Retry):
    """redis-py's :class:`Retry`, counting failed attempts (each followed by a retry, or by
    the error) in one count shared by the copies redis-py makes of it for each connection:
    one count per client."""

    def __init__(self, backoff: AbstractBackoff, retries: int) -> None:
        super().__init__(backoff, retries)
        self.failures = [0]  # a list: shared by the copies

    def __deepcopy__(self, memo: dict[int, Any]) -> CountingRetry:
        return copy.copy(self)  # the backoff (stateless) and the count shared

    def call_with_retry(self, do: Callable[[], T], fail: Callable[..., Any],
                        is_retryable: Callable[[Exception], bool] | None = None,
                        with_failure_count: bool = False) -> T:
        def counted(error: Exception, *count: int) -> Any:
            self.failures[0] += 1
            return fail(error, *count)
        return super().call_with_retry(do, counted, is_retryable, with_failure_count)


def failed_attempts(client: redis.Redis) -> int:
    """How many attempts of `client`'s commands failed so far (0 for a client without a
    :class:`CountingRetry`): compare before and after a call to learn it was retried. A
    cluster client keeps its policy in ``retry``, a single-server one in its connections'
    keywords (``get_retry``)."""
    get_retry = getattr(client, "get_retry", None)
    retry = get_retry() if get_retry is not None else getattr(client, "retry", None)
    return retry.failures[0] if isinstance(retry, CountingRetry) else 0


def count_failure(retry: Retry | None) -> None:
    """One more failed attempt on `retry`'s count (a cluster client retries in a loop of
    its own, outside :meth:`CountingRetry.call_with_retry`)."""
    if isinstance(retry, CountingRetry):
        retry.failures[0] += 1
