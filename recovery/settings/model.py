"""Settings of a recovery run: one pydantic model, validated on the driver.

Sources, lowest to highest precedence:

1. defaults in the sections' modules;
2. the TOML file given with ``--config``;
3. environment variables ``RECOVERY_<SECTION>__<FIELD>`` (e.g. ``RECOVERY_CLAIM__MIN_IDLE_MS``);
4. ``--set section.field=value`` on the command line; ``--set section.field=`` (empty) sets an
   optional setting (one whose default is none) back to none, whatever the file or the
   environment said; a setting that needs a value is refused with its default named.

An unknown key (in the file, a variable or ``--set``) is refused with the nearest known one.

The Redis password may come from ``redis.password`` (better: ``RECOVERY_REDIS__PASSWORD``),
from ``redis.password_file``, or from the URL; it is held as a ``SecretStr`` and never printed.
What travels to executors is ``recovery.params.JobParams``, a small frozen dataclass built
here (:func:`executor_params`); executors never import this module (nor pydantic).
"""

from __future__ import annotations

import difflib
import json
import os
import re
from pathlib import Path
from typing import Any

from pydantic import Field, ValidationError, model_validator
from pydantic.fields import FieldInfo
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from recovery.errors import ConfigError
from recovery.params import JobParams, OrderParams, RedisParams
from recovery.redis_io.dlq_names import name_clash
from recovery.redis_io.scripts import LEASE_FRESH_S, handler_outlasts_lease
from recovery.settings.claim import ClaimSettings
from recovery.settings.dead_letters import DeadLettersSettings
from recovery.settings.metrics import MetricsSettings
from recovery.settings.order import OrderSettings
from recovery.settings.redis import RedisSettings, redacted_url
from recovery.settings.redrive import RedriveSettings
from recovery.settings.reprocess import (
    HandlerReprocess,
    Reprocess,
    reprocess_fields,
    setting_loc,
)
from recovery.settings.sections import (
    DeadLetterSettings,
    HandlerSettings,
    HousekeepingSettings,
    PlanSettings,
    ReportSettings,
    SparkSettings,
    StreamsSettings,
)

LIST_FIELDS = ("keys", "groups", "dead_letter_exceptions")  # --set a,b or ["a", "b"]
MISSING_HINTS = {"streams": "select streams: set streams.keys and/or streams.match"}


class Settings(BaseSettings):
    """All settings of a run."""

    model_config = SettingsConfigDict(
        env_prefix="RECOVERY_", env_nested_delimiter="__", extra="forbid", frozen=True
    )

    redis: RedisSettings = Field(default_factory=RedisSettings)
    streams: StreamsSettings
    claim: ClaimSettings = Field(default_factory=ClaimSettings)
    dead_letter: DeadLetterSettings = Field(default_factory=DeadLetterSettings)
    handler: HandlerSettings = Field(default_factory=HandlerSettings)
    reprocess: Reprocess = Field(default_factory=HandlerReprocess)  # one class per mode
    report: ReportSettings = Field(default_factory=ReportSettings)
    housekeeping: HousekeepingSettings = Field(default_factory=HousekeepingSettings)
    spark: SparkSettings = Field(default_factory=SparkSettings)
    plan: PlanSettings = Field(default_factory=PlanSettings)
    redrive: RedriveSettings = Field(default_factory=RedriveSettings)
    dead_letters: DeadLettersSettings = Field(default_factory=DeadLettersSettings)
    metrics: MetricsSettings = Field(default_factory=MetricsSettings)
    order: OrderSettings = Field(default_factory=OrderSettings)

    @model_validator(mode="after")
    def _lease_outlasts_handler(self) -> Settings:
        # The lease renewed before each handler call lasts claim.min_idle_ms, and a reading
        # serves the calls of the next LEASE_FRESH_S: a slower call lets another run claim
        # (and handle) the same entries.
        timeout_s = self.handler.timeout_s
        if handler_outlasts_lease(self.claim.min_idle_ms, timeout_s):
            raise ValueError(
                f"handler.timeout_s ({timeout_s:g} s) must be shorter than claim.min_idle_ms "
                f"({self.claim.min_idle_ms} ms) by more than {LEASE_FRESH_S * 1000:g} ms (a "
                "lease reading serves the calls of that long after it), or another run may "
                "claim entries while the handler still works on them: lower the timeout or "
                "raise min_idle_ms"
            )
        return self

    @model_validator(mode="after")
    def _dead_letters_apart(self) -> Settings:
        # Dead letters never go into a selected source or a requeue target (issue 60).
        clash = name_clash(self.dead_letter.names, self.streams.keys, self.streams.groups,
                           self.reprocess.option("requeue_stream"))
        if clash is not None:
            raise ValueError(clash)
        return self

    @model_validator(mode="after")
    def _order_needs_the_handler(self) -> Settings:
        # Requeue appends copies that live consumers read in whatever order they read;
        # reassign gives entries to live consumers that may hold older ones of the key: the
        # job could not keep a key in order after it let go of its entries.
        if self.order.ordered and not self.reprocess.keeps_key_order:
            raise ValueError(
                f"order.key_field needs reprocess.mode = \"handler\" (it is "
                f"{self.reprocess.mode!r}): a {self.reprocess.mode} hands entries to live "
                "consumers, which read them in their own order, so the job cannot keep a "
                "key in order; use the handler mode or unset order.key_field / "
                "order.key_fields")
        return self

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # The file, if any, is the toml_file of the subclass load_settings makes for it.
        return init_settings, env_settings, TomlConfigSettingsSource(settings_cls)


def load_settings(config_file: Path | None, overrides: list[str] | None = None) -> Settings:
    """Build settings from file, environment and ``section.field=value`` overrides.

    Raises ConfigError with one line naming the field and the fix.
    """
    if config_file is not None and not config_file.is_file():
        raise ConfigError(f"config file {config_file} does not exist: pass an existing --config")
    init = _overrides_to_dict(overrides or [])
    _refuse_unknown_sections_in_environment()
    settings_cls = Settings
    if config_file is not None:  # the same model, reading this file (pydantic-settings' way)
        with_file = SettingsConfigDict(**{**Settings.model_config, "toml_file": config_file})
        settings_cls = type("FileSettings", (Settings,), {"model_config": with_file})  # type: ignore[assignment]
    try:
        return settings_cls(**init)
    except ValidationError as exc:
        raise ConfigError(describe_validation_error(exc, init)) from None
    except ValueError as exc:  # TOML syntax errors and unreadable password files
        if type(exc).__name__ == "TOMLDecodeError":  # tomllib
            raise ConfigError(
                f"config file {config_file} is not valid TOML ({exc}): fix its syntax"
            ) from None
        raise ConfigError(f"config: {exc}") from None


def _refuse_unknown_sections_in_environment() -> None:
    """pydantic-settings ignores ``RECOVERY_<SECTION>__<FIELD>`` for a section the model does
    not have (a typo would silently not apply): refuse it as an unknown setting."""
    problems = []
    for variable in sorted(os.environ):
        if not variable.upper().startswith("RECOVERY_"):
            continue
        section, sep, _ = variable.upper().removeprefix("RECOVERY_").partition("__")
        if sep and section.lower() not in Settings.model_fields:
            problems.append(f"{section.lower()}: unknown setting{_nearest((section.lower(),))} "
                            f"(from {variable})")
        elif not sep and (meant := _one_underscore_for_two(section.lower())):
            problems.append(f"{variable} is not read (one _ between section and field), did "
                            f"you mean {meant}?")
    if problems:
        raise ConfigError("invalid config: " + "; ".join(problems) + " (fix or unset the "
                          "variable: RECOVERY_<SECTION>__<FIELD>)")


def _one_underscore_for_two(name: str) -> str | None:
    """``RECOVERY_CLAIM__MIN_IDLE_MS`` for ``claim_min_idle_ms`` (a variable written with one
    ``_`` where two separate section and field: ignored by pydantic-settings), else None."""
    for section in Settings.model_fields:
        field = name.removeprefix(f"{section}_")
        if field != name and field in section_fields(section):
            return f"RECOVERY_{section}__{field}".upper()
    return None


def describe_validation_error(exc: ValidationError, overrides: dict[str, Any] | None = None
                              ) -> str:
    """One line naming every bad field, what is wrong, and where to fix it: the ``--set``
    when `overrides` (as ``_overrides_to_dict`` makes them) holds the field, else the
    environment variable when one is set for it, else the config file or the environment."""
    problems = []
    for err in exc.errors():
        err["loc"] = setting_loc(err["loc"])
        loc = ".".join(str(p) for p in err["loc"]) or "config"
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            msg = "unknown setting" + _nearest(err["loc"]) + (
                " (check the spelling against conf/recovery.toml; `redis-stream-recovery init` "
                "writes it)")
        elif _emptied(err["loc"], overrides or {}):
            msg = _cannot_unset(err["loc"], msg)
        elif err["type"] == "missing":
            msg = MISSING_HINTS.get(loc, "required; set it in the config file or the environment")
        problems.append(f"{loc}: {msg}{_source_of(err['loc'], overrides or {})}")
    env_hint = "fix it in the --config file, the RECOVERY_<SECTION>__<FIELD> variable or --set"
    return "invalid config: " + "; ".join(problems) + f" ({env_hint})"


def _source_of(loc: tuple[int | str, ...], overrides: dict[str, Any]) -> str:
    """Where a bad field's value came from, when it is sure: `` (from --set)`` or
    `` (from RECOVERY_<SECTION>__<FIELD>)``; "" otherwise (the file, or a default)."""
    if len(loc) != 2:
        return ""
    section, name = str(loc[0]), str(loc[1])
    if name in overrides.get(section, {}):
        return " (from --set)"
    variable = f"RECOVERY_{section}__{name}".upper()
    named = [key for key in os.environ if key.upper() == variable]  # matched ignoring case
    return f" (from {named[0]})" if named else ""


def _nearest(loc: tuple[int | str, ...]) -> str:
    """``, did you mean claim.min_idle_ms?`` for an unknown section or field close to a known
    one (difflib); "" when none is close."""
    known: dict[str, Any] = dict(Settings.model_fields)
    if len(loc) == 2:
        known = dict(section_fields(str(loc[0])))
        prefix = f"{loc[0]}."
    elif len(loc) == 1:
        prefix = ""
    else:
        return ""
    close = difflib.get_close_matches(str(loc[-1]), list(known), n=1, cutoff=0.6)
    return f", did you mean {prefix}{close[0]}?" if close else ""


def _field_default(section: str, name: str) -> tuple[bool, Any]:
    """(known, default) of ``section.name``; the default is PydanticUndefined for a field
    without one."""
    field = section_fields(section).get(name)
    if field is None:
        return False, None
    return True, field.get_default(call_default_factory=True)


def _emptied(loc: tuple[int | str, ...], overrides: dict[str, Any]) -> bool:
    """True when the bad field is one a ``--set section.field=`` gave an empty value."""
    return len(loc) == 2 and overrides.get(str(loc[0]), {}).get(str(loc[1])) == ""


def _cannot_unset(loc: tuple[int | str, ...], msg: str) -> str:
    known, default = _field_default(str(loc[0]), str(loc[1]))
    named = f" (default {json.dumps(default, default=str)})" if known else ""
    return (f"{msg}; an empty --set value unsets only an optional setting (default none), "
            f"and this one needs a value{named}: give one")


def section_fields(section: str) -> dict[str, FieldInfo]:
    """The keys of ``[section]`` and their fields (``reprocess``: every mode's); none for a
    section the settings do not have."""
    if section == "reprocess":
        return reprocess_fields()
    outer = Settings.model_fields.get(section)
    return dict(getattr(outer.annotation, "model_fields", {})) if outer is not None else {}


def effective_config(settings: Settings) -> dict[str, Any]:
    """The settings as a run applies them (defaults, file, environment and ``--set``
    merged), as JSON-ready data: secrets masked (``**********``), any password in
    ``redis.url`` replaced by ``***``."""
    data = settings.model_dump(mode="json")
    data["redis"]["url"] = redacted_url(settings.redis.url)
    return data


def executor_params(settings: Settings, run_id: str, scheduler_run_id: str | None = None
                    ) -> JobParams:
    """The frozen, picklable subset of settings that executors need, for the run `run_id`
    (and the scheduler's `scheduler_run_id`, if any)."""
    rate = settings.claim.max_entries_per_s
    return JobParams(
        run_id=run_id,
        scheduler_run_id=scheduler_run_id,
        redis=redis_params(settings),
        min_idle_ms=settings.claim.min_idle_ms,
        count=settings.claim.count,
        max_deliveries=settings.claim.max_deliveries,
        dlq_suffix=settings.dead_letter.suffix,
        dlq_stream=settings.dead_letter.stream,
        dlq_batch_size=settings.dead_letter.batch_size,
        handler_path=settings.handler.path or "",  # "": none (requeue, reassign, dry run)
        handler_batch_size=settings.handler.batch_size,
        handler_timeout_s=settings.handler.timeout_s,
        handler_dead_letter_exceptions=tuple(settings.handler.dead_letter_exceptions),
        reprocess_mode=settings.reprocess.mode,
        mode_options=tuple(settings.reprocess.options().items()),
        delete_acked=settings.reprocess.delete_acked,
        consumer_prefix=settings.claim.consumer_prefix,
        backoff_factor=settings.claim.backoff_factor,
        backoff_max_ms=settings.claim.backoff_max_ms,
        max_entries_per_s_per_partition=(rate / settings.spark.partitions) if rate else None,
        order=order_params(settings),
    )


def order_params(settings: Settings) -> OrderParams | None:
    """What the executors need of ``order.*``; None when no stream is ordered."""
    order = settings.order
    if not order.ordered:
        return None
    return OrderParams(order.key_field, tuple(order.key_fields.items()), order.missing_key,
                       order.dead_letter_releases, order.scan_max, order.hold_prefix)


def redis_params(settings: Settings) -> RedisParams:
    """The connection parameters of `settings` (the password in plain text: never log it)."""
    r = settings.redis
    return RedisParams(
        url=r.url,
        username=r.username,
        password=r.password.get_secret_value() if r.password else None,
        connect_timeout_s=r.connect_timeout_s,
        socket_timeout_s=r.socket_timeout_s,
        min_transfer_bytes_per_s=r.min_transfer_bytes_per_s,
        tls_ca_file=str(r.tls_ca_file) if r.tls_ca_file else None,
        tls_cert_file=str(r.tls_cert_file) if r.tls_cert_file else None,
        tls_key_file=str(r.tls_key_file) if r.tls_key_file else None,
        tls_check_hostname=r.tls_check_hostname,
        cluster=r.cluster,
    )


def _overrides_to_dict(overrides: list[str]) -> dict[str, Any]:
    """``["claim.count=10"]`` -> ``{"claim": {"count": "10"}}`` (pydantic coerces types);
    ``metrics.pushgateway_url=`` -> ``{"metrics": {"pushgateway_url": None}}`` for a field
    whose default is None (any other empty value stays "" for the model to judge)."""
    result: dict[str, Any] = {}
    for item in overrides:
        key, sep, value = item.partition("=")
        path = key.strip().split(".")
        if not sep or len(path) != 2 or not all(path):
            raise ConfigError(f"--set {_key_only(item)!r}: write it as section.field=value, "
                              "e.g. claim.count=500")
        section, name = path
        parsed: Any = _list_value(item, value) if name in LIST_FIELDS else value
        if parsed == "" and _field_default(section, name) == (True, None):
            parsed = None  # unset: back to the default, none, over the file and environment
        result.setdefault(section, {})[name] = parsed
    return result


def _key_only(item: str) -> str:
    """A malformed ``--set`` item as an error may show it: its key (the leading letters,
    digits, ``_``, ``.`` and ``-``), the rest elided: its value may be a password."""
    key = re.match(r"[A-Za-z0-9_.\-]*", item).group()  # type: ignore[union-attr]
    rest = item[len(key):]
    return key + ("=..." if rest.startswith("=") else "..." if rest else "")


def _list_value(item: str, value: str) -> list[str]:
    """A list setting from --set: ``a,b`` or, as in the TOML file, ``["a", "b"]``."""
    if not value.strip().startswith("["):
        return [v for v in value.split(",") if v]
    try:
        parsed = json.loads(value)
    except ValueError:
        parsed = None
    if not isinstance(parsed, list) or not all(isinstance(v, str) for v in parsed):
        raise ConfigError(f"--set {item!r}: write a list as a,b or as [\"a\", \"b\"]")
    return parsed
