"""The ``[reprocess]`` settings, one class per mode (``recovery.settings.reprocess``): the
modes the settings accept, each mode's own keys (what travels to the executors) and the other
modes' keys, accepted and checked in every mode as they always were. Pure: no Redis, no
Spark (the same through ``load_settings``, with the names users write: test_model)."""

from __future__ import annotations

import pytest

from recovery.executor.handover.modes import MODES
from recovery.settings.reprocess import reprocess_fields, reprocess_settings

BUILT_IN = ["handler", "requeue", "reassign"]  # the modes users' configs name, in order


def test_the_settings_accept_exactly_the_registered_modes():
    assert [reprocess_settings(mode=name).mode for name in MODES] == list(MODES)
    assert reprocess_settings().mode == "handler"
    named = [repr(name) for name in MODES]
    with pytest.raises(ValueError, match=f"Input should be {', '.join(named[:-1])} or "
                                         f"{named[-1]}"):
        reprocess_settings(mode="requeue_all")


def test_each_mode_gets_its_own_keys_and_accepts_the_others():
    """A mode's settings class holds its own keys, and those travel (``options``); another
    mode's key is accepted in every mode and checked by its own mode's rules."""
    built_in = ["mode", "requeue_stream", "live_within_ms", "delete_acked"]  # in this order
    assert [key for key in reprocess_fields() if key in built_in] == built_in
    assert reprocess_settings(mode="requeue", requeue_stream="{stream}:r").options() == {
        "requeue_stream": "{stream}:r"}
    assert reprocess_settings(mode="reassign", live_within_ms="5").options() == {
        "live_within_ms": 5}
    handler = reprocess_settings(requeue_stream="{stream}:r", live_within_ms=7)
    assert handler.options() == {}
    assert (handler.option("requeue_stream"), handler.option("live_within_ms")) == (
        "{stream}:r", 7)
    assert reprocess_settings().model_dump().items() >= {
        "mode": "handler", "delete_acked": False, "requeue_stream": None,
        "live_within_ms": 60_000}.items()
    assert set(reprocess_settings().model_dump()) == set(reprocess_fields())
    for keys, refused in [({"live_within_ms": 0}, "greater than 0"),
                          ({"requeue_stream": "retry"}, "start it with {stream}"),
                          ({"requeue_streams": "x"}, "Extra inputs")]:
        for mode in BUILT_IN:
            with pytest.raises(ValueError, match=refused):
                reprocess_settings(mode=mode, **keys)
