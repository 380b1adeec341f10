"""The re-processing modes (``reprocess.mode``), one object each (``base.ReprocessMode``),
and the summary's action columns they make.

Each ``schemas.Mode`` member is a mode: its module here bears its value as name and holds
``MODE``, its object. Adding a mode is its module (a subclass overriding the hooks of
``base``: its actions, report columns, driver checks and executor step; plus its Lua script
in ``recovery/redis_io/lua/`` where it needs one), one line, its member in ``schemas.Mode``
(the settings accept the value from there, and this registry loads the module: eagerly, so a
member without its module fails every import of the hand-over, not the first run in that
mode), its settings class in ``recovery.settings.reprocess`` where it has keys of its own,
and its words in README's table of modes.
"""

from __future__ import annotations

from importlib import import_module

from recovery.executor.handover.modes.base import ModeOptions, ReprocessMode
from recovery.redis_io.scripts import SCRIPT_NAMES
from recovery.schemas import OUTCOME_COLUMNS, Action, Mode

__all__ = ["ACTIONS", "MODES", "PLAN_ACTIONS", "ModeOptions", "ReprocessMode", "mode_of"]

# The outcomes every mode shares: a run's, and a dry run's.
OUTCOMES = (Action.DEAD_LETTERED, Action.FAILED, Action.DELETED, Action.SKIPPED)
PLAN_OUTCOMES = (Action.WOULD_DEAD_LETTER, Action.DELETED)


def _load(mode: Mode) -> ReprocessMode:
    """The object of `mode`, from its module; ImportError when it is not a ReprocessMode of
    that name, or names a Lua script the job does not have or a report column that is not
    one of ``schemas.OUTCOME_COLUMNS``."""
    found = getattr(import_module(f"{__name__}.{mode.value}"), "MODE", None)
    if not isinstance(found, ReprocessMode) or found.name != mode:
        raise ImportError(f"{__name__}.{mode.value}.MODE is not the {mode.value!r} mode")
    unknown = sorted(set(found.scripts) - set(SCRIPT_NAMES))
    if unknown:
        raise ImportError(f"the {mode.value!r} mode calls scripts the job lacks: {unknown}")
    if not set(found.report_columns) <= set(OUTCOME_COLUMNS):
        raise ImportError(f"the {mode.value!r} mode's report columns {found.report_columns} "
                          f"are not of {OUTCOME_COLUMNS}: its outcome goes in `outcome`")
    return found


MODES: dict[str, ReprocessMode] = {mode.value: _load(mode) for mode in Mode}


def mode_of(name: str) -> ReprocessMode:
    """The mode a ``reprocess.mode`` value names (the settings accept no other)."""
    return MODES[name]


# The summary's columns (its per-stream table and JSON totals) of a run and of a dry run:
# the default mode's (Mode's first member) first, then the shared outcomes, then each other
# mode's, in Mode's order; the order they always had.
_DEFAULT, *_OTHERS = MODES.values()
ACTIONS: tuple[str, ...] = (_DEFAULT.done, *OUTCOMES, *(m.done for m in _OTHERS))
PLAN_ACTIONS: tuple[str, ...] = (_DEFAULT.planned, *PLAN_OUTCOMES,
                                 *(m.planned for m in _OTHERS))
