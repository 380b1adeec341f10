"""``[reprocess]``: how entries that are not dead-lettered are re-processed, one settings
class per ``reprocess.mode`` (a pydantic discriminated union on ``mode``).

- ``ReprocessSettings``: what every mode reads (``mode``, ``delete_acked``), and the base of
  each mode's class. A mode with keys of its own subclasses it and is named in ``OWN``; a
  mode without keys needs nothing here (``vocabulary.Mode`` registers every mode).
- ``Reprocess``: the type of ``Settings.reprocess``, one member per ``vocabulary.Mode``,
  chosen by ``mode`` (absent: ``handler``, the default; a value no mode has: refused).
- A key of another mode is accepted in every mode, checked by its own mode's rules and
  ignored there (a config switched between modes with ``--set reprocess.mode=...`` keeps
  working); a key no mode has is refused, with the nearest known one.
- ``options()``: the chosen mode's own keys, which travel to the executors
  (``recovery.params.JobParams.mode_options``).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Union

from pydantic import (
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    TypeAdapter,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic.fields import FieldInfo

from recovery.settings.base import Section
from recovery.vocabulary import Mode

MODE_NAMES = tuple(mode.value for mode in Mode)
DEFAULT = Mode.HANDLER.value
ALONE = "one mode's keys alone"  # validation context: check them without the other modes'
# {stream}, then a suffix with fixed text that may hold {group}: without fixed text the name
# could be the source itself or its hash-tagged twin ("orders" -> "{orders}").
REQUEUE_TEMPLATE = re.compile(r"^\{stream\}(?=[^{}]|\{group\}[^{}])[^{}]*(\{group\}[^{}]*)?$")


def one_of(names: list[str]) -> str:
    """``a, b or c`` of `names` (at least two)."""
    return f"{', '.join(names[:-1])} or {names[-1]}"


def mode_problem(mode: object) -> str | None:
    """Why `mode` is no ``reprocess.mode``, or None."""
    if isinstance(mode, str) and mode in MODE_NAMES:
        return None
    return f"Input should be {one_of([repr(name) for name in MODE_NAMES])}"


class ReprocessSettings(Section):
    """How entries that are not dead-lettered are re-processed (README, "Re-processing"):
    the keys every mode reads, ``mode`` and ``delete_acked`` (XACKDEL ... ACKED instead of
    XACK, Redis 8.2+), and the base of each mode's class (module doc); the settings of a
    mode without keys of its own."""

    model_config = ConfigDict(extra="allow", frozen=True)  # other modes' keys, checked below

    # order.key_field needs a mode that keeps each key's entries in ID order.
    keeps_key_order: ClassVar[bool] = False

    mode: str = Field(DEFAULT, description=(
        one_of([f"`{name}`" for name in MODE_NAMES])
        + " (README, \"Re-processing without Python\")"))
    delete_acked: bool = Field(False, description=(
        "ack with `XACKDEL ... ACKED` after a hand-over, a dead-letter move and a requeue: "
        "the entry is also deleted from its stream once no other consumer group references "
        "it (Redis 8.2+; refused, exit 2, on a server without XACKDEL): "
        "[docs/OPERATIONS.md](docs/OPERATIONS.md#deleting-what-every-group-has-acked)"))

    @field_validator("mode", mode="before")
    @classmethod
    def _registered_mode(cls, mode: object) -> object:
        problem = mode_problem(mode)
        if problem is not None:
            raise ValueError(problem)
        return mode

    @model_validator(mode="before")
    @classmethod
    def _keys_of_other_modes(cls, data: Any, info: ValidationInfo) -> Any:
        """`data` with every other mode's keys (given or default), each checked by its own
        mode's class; a key no mode has is refused."""
        if info.context == ALONE or not isinstance(data, dict):
            return data
        errors: list[Any] = [{"type": "extra_forbidden", "loc": (key,), "input": value}
                             for key, value in data.items()
                             if key not in cls.model_fields and key not in OWNER]
        values = dict(data)
        for name, other in OWN.items():
            if issubclass(cls, other):
                continue
            given = {key: data[key] for key in own_keys(other) if key in data}
            try:
                made = other.model_validate({**given, "mode": name}, context=ALONE)
            except ValidationError as exc:
                errors += [{"type": e["type"], "loc": e["loc"], "input": e["input"],
                            "ctx": e.get("ctx", {})} for e in exc.errors()]
                continue
            values |= {key: getattr(made, key) for key in own_keys(other)}
        if errors and (problem := mode_problem(data.get("mode", DEFAULT))) is not None:
            errors.insert(0, {"type": "value_error", "loc": ("mode",), "input": data["mode"],
                              "ctx": {"error": ValueError(problem)}})
        if errors:
            raise ValidationError.from_exception_data(cls.__name__, errors)
        return values

    def options(self) -> dict[str, Any]:
        """This mode's own keys and their values (what its executor step reads)."""
        return {key: getattr(self, key) for key in own_keys(type(self))}

    def option(self, key: str) -> Any:
        """The value of `key`, a key of any mode (another mode's: as given, or its
        default)."""
        return getattr(self, key)


class HandlerReprocess(ReprocessSettings):
    """``reprocess.mode = handler``: the only mode that keeps each key in order."""

    keeps_key_order = True


class RequeueReprocess(ReprocessSettings):
    """``reprocess.mode = requeue``: where the copies go, the source stream or a per-group
    retry stream (``{stream}`` then a suffix with fixed text, which may hold ``{group}``)."""

    requeue_stream: str | None = Field(None, description=(
        "requeue into a per-group retry stream: `{stream}` then a suffix with fixed text "
        "that may hold `{group}`, e.g. `{stream}:retry:{group}`; none: the source stream "
        "(single-group streams only)"))

    @field_validator("requeue_stream")
    @classmethod
    def _template_shape(cls, template: str | None) -> str | None:
        if template is not None and not REQUEUE_TEMPLATE.match(template):
            raise ValueError(
                f"{template!r} is not a retry stream name: start it with {{stream}} and add a "
                "suffix with fixed text that may hold {group}, e.g. {stream}:retry:{group}")
        return template


class ReassignReprocess(ReprocessSettings):
    """``reprocess.mode = reassign``: which consumers are live."""

    live_within_ms: int = Field(60_000, gt=0, description=(
        "reassign: a consumer seen within this many ms is live"))


# The settings class of each mode that has keys or checks of its own (the others use the
# base), in Mode's order.
OWN: dict[str, type[ReprocessSettings]] = {
    Mode.HANDLER.value: HandlerReprocess,
    Mode.REQUEUE.value: RequeueReprocess,
    Mode.REASSIGN.value: ReassignReprocess,
}
VARIANTS = {name: OWN.get(name, ReprocessSettings) for name in MODE_NAMES}


def own_keys(variant: type[ReprocessSettings]) -> list[str]:
    """The keys `variant` adds to every mode's (``mode``, ``delete_acked``)."""
    return [key for key in variant.model_fields if key not in ReprocessSettings.model_fields]


OWNER = {key: name for name, variant in OWN.items() for key in own_keys(variant)}


def _tag(value: Any) -> str:
    """The mode whose class validates `value` (a dict or a settings object): its ``mode``;
    the default's for none, and for a value no mode has (whose check then refuses it)."""
    mode = value.get("mode", DEFAULT) if isinstance(value, dict) else getattr(value, "mode",
                                                                              DEFAULT)
    return mode if mode_problem(mode) is None else DEFAULT


if TYPE_CHECKING:
    Reprocess = ReprocessSettings
else:
    Reprocess = Annotated[Union[tuple(Annotated[cls, Tag(name)]  # noqa: UP007
                                      for name, cls in VARIANTS.items())],
                          Discriminator(_tag)]


def reprocess_settings(**keys: Any) -> ReprocessSettings:
    """The ``[reprocess]`` settings of `keys` (as the config file gives them)."""
    made: ReprocessSettings = TypeAdapter(Reprocess).validate_python(keys)
    return made


def reprocess_fields() -> dict[str, FieldInfo]:
    """Every key of ``[reprocess]`` and its field: ``mode``, each mode's own keys (in
    Mode's order), then the rest of every mode's."""
    common = dict(ReprocessSettings.model_fields)
    keys = {"mode": common.pop("mode")}
    for variant in OWN.values():
        keys |= {key: variant.model_fields[key] for key in own_keys(variant)}
    return keys | common


def setting_loc(loc: tuple[int | str, ...]) -> tuple[int | str, ...]:
    """A validation error's location as the user wrote the key: without the mode's tag that
    the union adds (``reprocess.reassign.live_within_ms`` -> ``reprocess.live_within_ms``)."""
    if len(loc) > 1 and loc[0] == "reprocess" and loc[1] in MODE_NAMES:
        return (loc[0], *loc[2:])
    return loc
