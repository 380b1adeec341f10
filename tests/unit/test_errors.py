"""The job's typed errors (recovery.errors) and their exit codes, the contract with
schedulers (README "Exit codes"): 2 for what the user must fix in the config, arguments,
dead-letter naming or handler; 1 for every other failure; a unit's error names its stream
and group in one line. Pure."""

from __future__ import annotations

import inspect

import recovery.errors as errors
from recovery.errors import EXIT_BAD_INPUT, EXIT_FAILURE, RecoveryError, StreamUnitError

BAD_INPUT = {"ConfigError", "DeadLetterNameError", "HandlerError", "HeldElsewhereError"}


def test_every_typed_error_exits_as_the_readme_says() -> None:
    """Catches an error class whose exit code changed (a scheduler then retries a bad config
    forever, or gives up on an outage), and a new class left out of this table."""
    classes = {name: cls for name, cls in inspect.getmembers(errors, inspect.isclass)
               if issubclass(cls, RecoveryError)}
    assert set(classes) > BAD_INPUT and len(classes) >= 11
    assert {name: cls.exit_code for name, cls in classes.items()} == {
        name: EXIT_BAD_INPUT if name in BAD_INPUT else EXIT_FAILURE for name in classes}
    assert (errors.EXIT_OK, EXIT_FAILURE, EXIT_BAD_INPUT) == (0, 1, 2)


def test_a_unit_error_keeps_its_kind_and_names_stream_and_group_in_one_line() -> None:
    found = StreamUnitError("no-group", "orders{eu}", "billing", "NOGROUP no such group")
    assert (found.kind, found.stream, found.group) == ("no-group", "orders{eu}", "billing")
    assert str(found) == "orders{eu} / billing: NOGROUP no such group"
    assert str(StreamUnitError("wrong-type", "s", None, "WRONGTYPE")) == "s: WRONGTYPE"
