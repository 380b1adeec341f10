"""What a re-processing mode is (``reprocess.mode``): one object that owns every hook the
job calls for it, in the manner of rq's worker classes (each variant overrides a method).

- ``name``: its ``reprocess.mode`` value (a ``schemas.Mode`` member, and its module's name);
- ``done`` / ``planned``: the REPORT action of an entry it re-processed, and a dry run's
  action for one it would (the summary's columns: ``recovery.executor.handover.modes``);
- ``scripts``: the Lua scripts (``recovery/redis_io/lua/<name>.lua``) its step calls;
- ``calls_handler``: whether a real run needs ``handler.path``;
- ``check_stream``: on the driver, before anything is claimed, refuse a stream it cannot
  re-process (ConfigError, exit 2);
- ``hand_over``: on an executor, what happens to a batch's entries routed to re-processing.

Executors import this: nothing here reads the settings model (``ReprocessChoice`` is the
shape of what the driver passes).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import ClassVar, Protocol

import redis

from recovery.executor.handover.routed import RoutedBatch
from recovery.params import JobParams
from recovery.schemas import Mode


class ReprocessChoice(Protocol):
    """The ``reprocess`` settings as the driver's checks read them (the settings section
    has this shape; executors get the same values in ``JobParams``)."""

    @property
    def mode(self) -> str: ...

    @property
    def requeue_stream(self) -> str | None: ...

    @property
    def live_within_ms(self) -> int: ...


class ReprocessMode(ABC):
    """One way of re-processing claimed entries that are not dead-lettered (module doc)."""

    name: ClassVar[Mode]
    done: ClassVar[str]
    planned: ClassVar[str]
    scripts: ClassVar[tuple[str, ...]] = ()
    calls_handler: ClassVar[bool] = False

    def check_stream(self, stream: str, groups: Sequence[str], choice: ReprocessChoice
                     ) -> None:
        """On the driver: raise ConfigError (exit 2, before anything is claimed) when this
        mode cannot re-process `stream`, whose consumer groups are `groups` (all of them,
        selected or not), as `choice` configures it. By default every stream will do."""
        return None

    @abstractmethod
    def hand_over(self, client: redis.Redis, params: JobParams, rb: RoutedBatch,
                  rows: list[int], read_at: float | None) -> None:
        """On an executor: re-process `rows` of `rb` (routed to re-processing, each with its
        fields, none over the delivery limit) and give each exactly one outcome
        (``rb.set``). `read_at` (``time.monotonic()`` s): when the job consumer's ownership
        of the batch was last read, or None."""


def deliveries_so_far(rb: RoutedBatch, i: int) -> int:
    """Row `i`'s deliveries to the application so far: its delivery count (carried ones
    included) without the job's own claim, which delivered it to no application."""
    return max(0, (rb.delivery_count[i] or 1) - 1)
