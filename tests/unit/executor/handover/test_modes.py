"""The re-processing modes as objects (``recovery.executor.handover.modes``): one per
``schemas.Mode`` member, each with the hooks of ``recovery.executor.handover.modes.base``
(``recovery.executor.handover.modes.handler``, ``recovery.executor.handover.modes.requeue``,
``recovery.executor.handover.modes.reassign``); the summary's columns they make, unchanged;
the report columns each mode owns (its settings: tests/unit/settings/test_reprocess.py; the
requeue mode's driver checks: modes/test_requeue.py). Pure: no Redis, no Spark session (the
modes' executor steps run against real servers in test_apply, test_requeue, test_reassign)."""

from __future__ import annotations

from importlib import import_module

from recovery.executor.handover.modes import (
    ACTIONS,
    MODES,
    PLAN_ACTIONS,
    base,
    handler,
    mode_of,
    reassign,
    requeue,
)
from recovery.redis_io.scripts import SCRIPT_NAMES
from recovery.schemas import OUTCOME_COLUMNS, Mode

BUILT_IN = ["handler", "requeue", "reassign"]  # the modes users' configs name, in order


def test_every_mode_is_registered_once_by_its_name_in_modes_order():
    assert list(MODES)[:3] == BUILT_IN and list(MODES) == [m.value for m in Mode]
    assert all(mode_of(name).name == name for name in MODES)
    assert [m for m in MODES.values() if m.calls_handler] == [mode_of("handler")]


def test_each_mode_is_the_object_its_own_module_defines():
    """The registry loads ``modes.<name>.MODE`` by name: it holds those very objects, each a
    ``base.ReprocessMode``."""
    assert {name: MODES[name] for name in BUILT_IN} == {
        "handler": handler.MODE, "requeue": requeue.MODE, "reassign": reassign.MODE}
    assert all(mode is import_module(f"recovery.executor.handover.modes.{name}").MODE
               for name, mode in MODES.items())
    assert all(isinstance(mode, base.ReprocessMode) for mode in MODES.values())


def test_the_summarys_columns_stay_as_they_were():
    """The built-in modes' columns, in the order users' scripts read them; a mode added
    later adds its own after them."""
    assert ACTIONS[:7] == ("reprocessed", "dead_lettered", "failed", "deleted", "skipped",
                           "requeued", "reassigned")
    assert PLAN_ACTIONS[:5] == ("would_reprocess", "would_dead_letter", "deleted",
                                "would_requeue", "would_reassign")
    assert ACTIONS[7:] == tuple(m.done for m in list(MODES.values())[3:])
    assert [(m.done, m.planned) for m in MODES.values()][:3] == [
        ("reprocessed", "would_reprocess"), ("requeued", "would_requeue"),
        ("reassigned", "would_reassign")]


def test_each_mode_owns_its_report_columns():
    """The built-in modes repeat their outcome in the columns they always had; every other
    report column is the same for all modes."""
    assert {name: mode_of(name).report_columns for name in BUILT_IN} == {
        "handler": (), "requeue": ("requeued_id",), "reassign": ("reassigned_to",)}
    assert all(set(m.report_columns) <= set(OUTCOME_COLUMNS) for m in MODES.values())


def test_each_modes_scripts_are_lua_files_of_the_job():
    assert set(SCRIPT_NAMES) >= {"claim_due", "dead_letter", "delete_empty_consumer",
                                 "lease_owned", "letter_page", "reassign", "redrive",
                                 "requeue", "trim_letters", "unclaim_held"}
    assert {name: mode_of(name).scripts for name in BUILT_IN} == {
        "handler": ("lease_owned",), "requeue": ("requeue",), "reassign": ("reassign",)}
    assert all(set(m.scripts) <= set(SCRIPT_NAMES) for m in MODES.values())
