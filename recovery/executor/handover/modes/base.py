"""What a re-processing mode is (``reprocess.mode``): one object that owns every hook the
job calls for it, in the manner of rq's worker classes (each variant overrides a method).

- ``name``: its ``reprocess.mode`` value (a ``schemas.Mode`` member, and its module's name);
- ``done`` / ``planned``: the REPORT action of an entry it re-processed, and a dry run's
  action for one it would (the summary's columns: ``recovery.executor.handover.modes``);
  plain strings (``schemas.Action`` holds the built-in modes' for the scripts that read
  them);
- ``report_columns``: the REPORT columns that repeat its outcome (``schemas.OUTCOME_COLUMNS``:
  the built-in modes' own, as they always had them; a new mode needs none: its outcome is in
  ``outcome``, from ``RoutedBatch.set(..., outcome=...)``);
- ``scripts``: the Lua scripts (``recovery/redis_io/lua/<name>.lua``) its step calls;
- ``calls_handler``: whether a real run needs ``handler.path``;
- ``stays_pending``: whether an entry it re-processed stays pending, on another consumer of
  its group (the last PEL read of a unit's health histogram skips it:
  ``recovery.executor.claim.left_counts``);
- ``check_source``: on the driver, before anything is claimed, skip a stream it has no
  name for (DeadLetterNameError, a ``skipped`` row; the rest of the run goes on);
- ``check_stream``: on the driver, before anything is claimed, refuse a stream it cannot
  re-process (ConfigError, exit 2);
- ``check_units`` / ``check_targets``: on the driver, once every unit to claim from is
  known (by discovery, or from the plan a run applies), refuse units it cannot re-process
  together: by their names, then by what Redis holds (exit 2, nothing claimed);
- ``refused_targets``: on the driver, after a dry run, the units a real run would skip
  (the summary's skipped rows, as the real run's);
- ``hand_over``: on an executor, what happens to a batch's entries routed to re-processing.

Its settings are its own keys of ``[reprocess]`` (``recovery.settings.reprocess``, its
class there where it has keys): the driver passes them as ``ModeOptions`` (key -> value),
executors read them from ``JobParams.mode_option``. Executors import this: nothing here
reads the settings model.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import redis

from recovery.executor.handover.routed import RoutedBatch
from recovery.params import JobParams
from recovery.redis_io.dlq_names import DeadLetterNames
from recovery.redis_io.redis_conn import RedisConn
from recovery.rows import Skipped
from recovery.schemas import Mode

# A mode's own settings, key -> value (``ReprocessSettings.options()`` on the driver, the
# same as ``JobParams.mode_options`` on executors).
ModeOptions = Mapping[str, Any]
# Units as the driver's hooks take them: (stream, group) pairs, in discovery's order.
Pairs = Sequence[tuple[str, str]]


class ReprocessMode(ABC):
    """One way of re-processing claimed entries that are not dead-lettered (module doc)."""

    name: ClassVar[Mode]
    done: ClassVar[str]
    planned: ClassVar[str]
    report_columns: ClassVar[tuple[str, ...]] = ()
    scripts: ClassVar[tuple[str, ...]] = ()
    calls_handler: ClassVar[bool] = False
    stays_pending: ClassVar[bool] = False

    def check_source(self, stream: str, options: ModeOptions) -> None:
        """On the driver (discovery, a plan's streams): raise DeadLetterNameError when this
        mode, with its settings `options`, can name no key it writes for `stream`: the
        stream is then skipped with that reason, nothing of it claimed. By default none."""
        return None

    def check_stream(self, stream: str, groups: Sequence[str], options: ModeOptions
                     ) -> None:
        """On the driver: raise ConfigError (exit 2, before anything is claimed) when this
        mode cannot re-process `stream`, whose consumer groups are `groups` (all of them,
        selected or not), with its settings `options`. By default every stream will do."""
        return None

    def check_units(self, units: Pairs, names: DeadLetterNames, options: ModeOptions
                    ) -> None:
        """On the driver, once discovery found every unit with entries pending (or the
        units of a plan the run applies): raise
        ConfigError or DeadLetterNameError (exit 2, nothing touched) when this mode cannot
        re-process `units` together, decided by their names (`names`: the run's dead-letter
        names) and its settings `options`, before Redis is read again. By default any units
        will do."""
        return None

    def check_targets(self, conn: RedisConn, units: Pairs, options: ModeOptions) -> None:
        """On the driver, after :meth:`check_units` and when a plan is applied: raise
        ConfigError (exit 2, nothing claimed) when what Redis holds now (read through
        `conn`) keeps this mode from re-processing `units`. By default nothing is read."""
        return None

    def refused_targets(self, client: redis.Redis, units: Pairs, options: ModeOptions
                        ) -> list[Skipped]:
        """On the driver, after a dry run: of `units` (those it would re-process entries
        of), the ones a real run would skip, each with the reason the real run gives (its
        executor step's refusal). By default none."""
        return []

    @abstractmethod
    def hand_over(self, client: redis.Redis, params: JobParams, rb: RoutedBatch,
                  rows: list[int], read_at: float | None) -> None:
        """On an executor: re-process `rows` of `rb` (routed to re-processing, each with its
        fields, none over the delivery limit) and give each exactly one action (``rb.set``,
        with its ``outcome`` where it made one). `read_at` (``time.monotonic()`` s): when
        the job consumer's ownership of the batch was last read, or None."""


def deliveries_so_far(rb: RoutedBatch, i: int) -> int:
    """Row `i`'s deliveries to the application so far: its delivery count (carried ones
    included) without the job's own claim, which delivered it to no application."""
    return max(0, (rb.delivery_count[i] or 1) - 1)
