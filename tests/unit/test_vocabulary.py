"""The outcome's words (``recovery/vocabulary.py``): the values users' scripts and the
report's readers match on, and the same objects through ``recovery.schemas``."""

from __future__ import annotations

import recovery.schemas as schemas
from recovery.vocabulary import (
    CARRIED_DELIVERIES,
    UNCERTAIN_REASON_PREFIX,
    Action,
    DeathReason,
    Mode,
    Route,
)


def test_the_values_scripts_match_on_stay_as_they_are() -> None:
    """Report actions, dead-letter reasons and modes are read by users' scripts and
    dashboards: a value renamed would break them."""
    assert [m.value for m in Mode] == ["handler", "requeue", "reassign"]
    assert {"reprocessed", "dead_lettered", "failed", "deleted", "skipped", "held",
            "would_reprocess", "would_dead_letter"} <= {a.value for a in Action}
    assert {r.value for r in DeathReason} >= {"max-deliveries-exceeded",
                                             "handler-failed-at-limit", "handler-rejected"}
    assert CARRIED_DELIVERIES == b"x-recovery-deliveries"
    assert UNCERTAIN_REASON_PREFIX == "uncertain: "


def test_schemas_re_exports_the_same_objects() -> None:
    """Every import from ``recovery.schemas`` keeps working, with the very same Enums (an
    ``isinstance`` or ``is`` against either spelling agrees)."""
    for name in ("Action", "DeathReason", "Mode", "Route", "CARRIED_DELIVERIES",
                 "UNCERTAIN_REASON_PREFIX"):
        assert getattr(schemas, name) is globals()[name], name
    assert Route.DEAD_LETTER == "dead_letter"
