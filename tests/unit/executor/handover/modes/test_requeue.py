"""The requeue mode's checks on the driver (``recovery.executor.handover.modes.requeue``):
the streams, units and retry streams it refuses before anything is claimed, where the other
modes refuse nothing. Pure: no Redis (its executor step and its checks against a server:
tests/integration/test_requeue.py, test_dead_letter_targets.py)."""

from __future__ import annotations

import pytest

from recovery.errors import ConfigError, DeadLetterNameError
from recovery.executor.handover.modes import mode_of, requeue
from recovery.redis_io.dlq_names import DeadLetterNames
from recovery.settings.reprocess import reprocess_settings


@pytest.mark.parametrize(("groups", "template", "refused"), [
    (["g"], None, False),
    (["a", "b"], "{stream}:retry:{group}", False),
    (["a", "b"], None, True),
    (["a", "b"], "{stream}:retry", True),
])
def test_only_requeue_refuses_a_stream_every_group_would_read_again(groups, template,
                                                                    refused):
    for name in ("handler", "reassign"):
        mode_of(name).check_stream("s", groups, {})
    options = reprocess_settings(mode="requeue", requeue_stream=template).options()
    if not refused:
        requeue.MODE.check_stream("s", groups, options)
        return
    with pytest.raises(ConfigError, match=r"reprocess.mode = requeue would append copies to"):
        requeue.MODE.check_stream("s", groups, options)


def test_only_requeue_refuses_a_dead_letter_stream_that_is_a_units_retry_stream():
    """``{orders}:retry`` / g dead-letters into ``{orders}:retry:x``, where the copies of
    orders / x go: refused by name, before Redis is read; the other modes, and requeue
    into the sources themselves, have nothing to refuse. (Against a server, with exit 2:
    tests/integration/test_dead_letter_targets.py.)"""
    units = [("orders", "x"), ("{orders}:retry", "g")]
    names = DeadLetterNames(template="{stream}:x")
    for name in ("handler", "reassign"):
        mode_of(name).check_units(units, names, {})
    requeue_mode = requeue.MODE
    requeue_mode.check_units(units, names, reprocess_settings(mode="requeue").options())
    options = reprocess_settings(mode="requeue",
                                 requeue_stream="{stream}:retry:{group}").options()
    with pytest.raises(DeadLetterNameError, match=(
            r"^the dead-letter stream of \{orders\}:retry / g is '\{orders\}:retry:x', the "
            r"reprocess.requeue_stream of orders / x: ")):
        requeue_mode.check_units(units, names, options)


def test_requeue_refuses_two_units_whose_retry_streams_are_one_key():
    """``a`` and ``{a}`` keep the hash tag ``a``: ``{stream}:retry:{group}`` names
    ``{a}:retry:g`` for both, and copies of two sources would mix in one retry stream (a
    copy carries no source). Found by an attack on the requeue targets; the same units in
    other groups, or other modes, are not refused."""
    options = reprocess_settings(mode="requeue",
                                 requeue_stream="{stream}:retry:{group}").options()
    names = DeadLetterNames(template="{stream}:dlq")
    requeue.MODE.check_units([("a", "g"), ("{a}", "h")], names, options)
    for name in ("handler", "reassign"):
        mode_of(name).check_units([("a", "g"), ("{a}", "g")], names, {})
    with pytest.raises(DeadLetterNameError, match=(
            r"^reprocess.requeue_stream '\{stream\}:retry:\{group\}' names '\{a\}:retry:g' "
            r"for both a / g and \{a\} / g: ")):
        requeue.MODE.check_units([("a", "g"), ("{a}", "g")], names, options)
