"""The re-processing modes as objects (``recovery.executor.handover.modes``): one per
``schemas.Mode`` member, each with the hooks of ``recovery.executor.handover.modes.base``
(``recovery.executor.handover.modes.handler``, ``recovery.executor.handover.modes.requeue``,
``recovery.executor.handover.modes.reassign``); the summary's columns they make, unchanged;
the driver's check each mode owns. Pure: no Redis, no Spark session (the modes' executor
steps run against real servers in test_apply, test_requeue, test_reassign)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from recovery.errors import ConfigError
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
from recovery.schemas import Mode
from recovery.settings.sections import ReprocessSettings


def test_every_mode_is_registered_once_by_its_name_in_modes_order():
    assert list(MODES) == ["handler", "requeue", "reassign"] == [m.value for m in Mode]
    assert all(mode_of(name).name == name for name in MODES)
    assert [m for m in MODES.values() if m.calls_handler] == [mode_of("handler")]


def test_each_mode_is_the_object_its_own_module_defines():
    """The registry loads ``modes.<name>.MODE`` by name: it holds those very objects, each a
    ``base.ReprocessMode``."""
    assert MODES == {"handler": handler.MODE, "requeue": requeue.MODE,
                     "reassign": reassign.MODE}
    assert all(isinstance(mode, base.ReprocessMode) for mode in MODES.values())


def test_the_summarys_columns_stay_as_they_were():
    assert ACTIONS == ("reprocessed", "dead_lettered", "failed", "deleted", "skipped",
                       "requeued", "reassigned")
    assert PLAN_ACTIONS == ("would_reprocess", "would_dead_letter", "deleted",
                            "would_requeue", "would_reassign")
    assert [(m.done, m.planned) for m in MODES.values()] == [
        ("reprocessed", "would_reprocess"), ("requeued", "would_requeue"),
        ("reassigned", "would_reassign")]


def test_each_modes_scripts_are_lua_files_of_the_job():
    assert SCRIPT_NAMES == ("claim_due", "dead_letter", "delete_empty_consumer", "lease_owned",
                            "letter_page", "reassign", "redrive", "requeue", "trim_letters",
                            "unclaim_held")
    assert {name: m.scripts for name, m in MODES.items()} == {
        "handler": ("lease_owned",), "requeue": ("requeue",), "reassign": ("reassign",)}


def test_the_settings_accept_exactly_the_registered_modes():
    assert [ReprocessSettings(mode=name).mode for name in MODES] == list(MODES)
    with pytest.raises(ValueError, match="Input should be 'handler', 'requeue' or 'reassign'"):
        ReprocessSettings(mode="requeue_all")


@pytest.mark.parametrize(("groups", "template", "refused"), [
    (["g"], None, False),
    (["a", "b"], "{stream}:retry:{group}", False),
    (["a", "b"], None, True),
    (["a", "b"], "{stream}:retry", True),
])
def test_only_requeue_refuses_a_stream_every_group_would_read_again(groups, template,
                                                                    refused):
    choice = SimpleNamespace(mode="requeue", requeue_stream=template, live_within_ms=1)
    for name in ("handler", "reassign"):
        mode_of(name).check_stream("s", groups, choice)
    if not refused:
        mode_of("requeue").check_stream("s", groups, choice)
        return
    with pytest.raises(ConfigError, match=r"reprocess.mode = requeue would append copies to"):
        mode_of("requeue").check_stream("s", groups, choice)
