"""Settings of a recovery run: one pydantic model, validated on the driver.

Sources, lowest to highest precedence:

1. defaults in this module;
2. the TOML file given with ``--config``;
3. environment variables ``RECOVERY_<SECTION>__<FIELD>`` (e.g. ``RECOVERY_CLAIM__MIN_IDLE_MS``);
4. ``--set section.field=value`` on the command line.

The Redis password may come from ``redis.password`` (better: ``RECOVERY_REDIS__PASSWORD``),
from ``redis.password_file``, or from the URL; it is held as a ``SecretStr`` and never printed.
What travels to executors is ``recovery.params.JobParams``, a small frozen dataclass built
here (:func:`executor_params`); executors never import this module (nor pydantic).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Literal
from urllib.parse import quote, unquote, urlsplit, urlunsplit

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from recovery.claim_settings import ClaimSettings
from recovery.dead_letters.settings import DeadLettersSettings
from recovery.errors import ConfigError
from recovery.params import JobParams, RedisParams
from recovery.redrive.settings import RedriveSettings

MISSING_HINTS = {"streams": "select streams: set streams.keys and/or streams.match"}
HANDLER_PATH = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class RedisSettings(_Section):
    """Where Redis is and how to log in."""

    url: str = "redis://127.0.0.1:6379/0"
    username: str | None = None
    password: SecretStr | None = None
    password_file: Path | None = None
    connect_timeout_s: float = Field(5.0, gt=0, le=300)
    socket_timeout_s: float = Field(30.0, gt=0, le=3600)
    tls_ca_file: Path | None = None
    tls_cert_file: Path | None = None
    tls_key_file: Path | None = None
    tls_check_hostname: bool = True
    # Redis Cluster: "auto" asks the server (INFO cluster) when a client opens.
    cluster: bool | Literal["auto"] = "auto"

    @model_validator(mode="before")
    @classmethod
    def _secrets_out_of_the_url(cls, data: Any) -> Any:
        """Keep secrets out of the plain-text URL: a password (and user) in ``url`` move to
        their own fields, unless those are set; ``password_file`` is read into an unset
        password. Before validation, so the model stays frozen."""
        if not isinstance(data, dict):
            return data
        data = dict(data)
        url = data.get("url")
        try:
            parts = urlsplit(url) if isinstance(url, str) else None
            if parts is not None and parts.password is not None:
                data["url"] = strip_userinfo(url)  # type: ignore[arg-type]
                if data.get("password") is None:
                    data["password"] = unquote(parts.password)
                if data.get("username") is None and parts.username:
                    data["username"] = unquote(parts.username)
        except ValueError:
            pass  # a bad port: the check below names it (and never shows the URL)
        if data.get("password_file") is not None and data.get("password") is None:
            data["password"] = _read_password(Path(data["password_file"]))
        return data

    @model_validator(mode="after")
    def _url_shape(self) -> RedisSettings:
        parts = urlsplit(self.url)
        if parts.scheme not in ("redis", "rediss") or not parts.hostname:
            raise ValueError(
                "redis.url must look like redis://host:port/db or rediss://host:port/db"
            )
        try:
            _ = parts.port
        except ValueError as exc:
            raise ValueError(
                "redis.url has a port that is not a number from 1 to 65535, e.g. "
                "redis://host:6379/0"
            ) from exc
        db = parts.path.strip("/")
        if db and not db.isdigit():
            raise ValueError(
                f"redis.url names database {db!r}: it must be a number, e.g. redis://host:6379/0"
            )
        return self


class StreamsSettings(_Section):
    """Which streams and groups to recover."""

    keys: list[str] = Field(default_factory=list)
    match: str | None = None
    groups: list[str] = Field(default_factory=list)
    scan_count: int = Field(1000, ge=1, le=100_000)

    @model_validator(mode="after")
    def _something_selected(self) -> StreamsSettings:
        if not self.keys and not self.match:
            raise ValueError("select streams: set streams.keys and/or streams.match")
        return self


class DeadLetterSettings(_Section):
    """Where dead letters go: ``<source><suffix>``, kept in the source's hash slot."""

    suffix: str = Field(":dlq", min_length=1, pattern=r"^[^{}]+$")
    batch_size: int = Field(200, ge=1, le=5000)


class HandlerSettings(_Section):
    """The re-processing handler: ``package.module:function`` over batches of messages. No
    default: a real run in ``handler`` mode names one (``recovery.driver.handler_choice``)."""

    path: str | None = None
    batch_size: int = Field(100, ge=1, le=100_000)
    max_failed_ratio: float | None = Field(None, ge=0, le=1)
    timeout_s: float | None = Field(None, gt=0, le=86_400)

    @field_validator("path")
    @classmethod
    def _path_shape(cls, path: str | None) -> str | None:
        if path is not None and not HANDLER_PATH.match(path):
            raise ValueError(
                f"{path!r} is not a handler path: write it as package.module:function, "
                "e.g. recovery.handlers:example_handler"
            )
        return path


REQUEUE_TEMPLATE = re.compile(r"^\{stream\}[^{}]*(\{group\}[^{}]*)?$")


class ReprocessSettings(_Section):
    """How entries that are not dead-lettered are re-processed (README, "Re-processing"):
    ``handler`` calls the handler; ``requeue`` appends each entry again, as a new message
    with its deliveries so far, to its stream (or to ``requeue_stream``, a per-group retry
    stream: ``{stream}`` then a suffix, which may hold ``{group}``) and acks the original;
    ``reassign`` hands it to a live consumer of its group (XCLAIM), spread evenly."""

    mode: Literal["handler", "requeue", "reassign"] = "handler"
    requeue_stream: str | None = None
    live_within_ms: int = Field(60_000, gt=0)  # reassign: "live" = seen within this (ms)

    @field_validator("requeue_stream")
    @classmethod
    def _template_shape(cls, template: str | None) -> str | None:
        if template is not None and not REQUEUE_TEMPLATE.match(template):
            raise ValueError(
                f"{template!r} is not a retry stream name: start it with {{stream}} and add a "
                "suffix that may hold {group}, e.g. {stream}:retry:{group}")
        return template


class ReportSettings(_Section):
    """Where the per-entry Parquet report goes (a directory, local or any Hadoop path)."""

    path: str = Field("reports", min_length=1)
    pel_histograms: bool = True  # read each group's whole PEL once for the health histograms
    # Seconds between the driver's progress lines (totals, and the streams that changed),
    # read from Redis while the stages run (recovery/driver/progress.py); 0 = off.
    progress_interval_s: float = Field(10.0, ge=0)
    # Units listed at most in the log's group health and summary tables (the others are
    # counted; every unit is in the health files and the JSON summary); 0 = all.
    log_units_max: int = Field(100, ge=0)


class HousekeepingSettings(_Section):
    """Optional clean-up of the groups (off by default)."""

    remove_idle_consumers_ms: int | None = Field(None, ge=1)


class SparkSettings(_Section):
    """How the work is spread."""

    partitions: int = Field(2, ge=1, le=10_000)
    # A stream and group with at least this many pending entries, and more than its share of
    # the run (all pending entries over `partitions`), is claimed and handed over by several
    # tasks at once (recovery.driver.split); 0 keeps each stream and group in one task.
    split_min_pending: int = Field(5000, ge=0)


class PlanSettings(_Section):
    """Applying a dry run's plan (``--plan``): how old a plan may be (s, from when the dry
    run started)."""

    max_age_s: int = Field(3600, ge=1)


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
    reprocess: ReprocessSettings = Field(default_factory=ReprocessSettings)
    report: ReportSettings = Field(default_factory=ReportSettings)
    housekeeping: HousekeepingSettings = Field(default_factory=HousekeepingSettings)
    spark: SparkSettings = Field(default_factory=SparkSettings)
    plan: PlanSettings = Field(default_factory=PlanSettings)
    redrive: RedriveSettings = Field(default_factory=RedriveSettings)
    dead_letters: DeadLettersSettings = Field(default_factory=DeadLettersSettings)

    @model_validator(mode="after")
    def _lease_outlasts_handler(self) -> Settings:
        # The lease renewed before each handler call lasts claim.min_idle_ms: a slower call
        # lets another run claim (and handle) the same entries.
        timeout_s = self.handler.timeout_s
        if timeout_s is not None and timeout_s * 1000 >= self.claim.min_idle_ms:
            raise ValueError(
                f"handler.timeout_s ({timeout_s:g} s) must be shorter than claim.min_idle_ms "
                f"({self.claim.min_idle_ms} ms), or another run may claim entries while the "
                "handler still works on them: lower the timeout or raise min_idle_ms"
            )
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
    settings_cls = Settings
    if config_file is not None:  # the same model, reading this file (pydantic-settings' way)
        with_file = SettingsConfigDict(**{**Settings.model_config, "toml_file": config_file})
        settings_cls = type("FileSettings", (Settings,), {"model_config": with_file})  # type: ignore[assignment]
    try:
        return settings_cls(**init)
    except ValidationError as exc:
        raise ConfigError(describe_validation_error(exc)) from None
    except ValueError as exc:  # TOML syntax errors and unreadable password files
        if type(exc).__name__ == "TOMLDecodeError":  # tomllib
            raise ConfigError(
                f"config file {config_file} is not valid TOML ({exc}): fix its syntax"
            ) from None
        raise ConfigError(f"config: {exc}") from None


def describe_validation_error(exc: ValidationError) -> str:
    """One line naming every bad field, what is wrong, and where to fix it."""
    problems = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"]) or "config"
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            msg = "unknown setting (check the spelling against conf/recovery.toml)"
        elif err["type"] == "missing":
            msg = MISSING_HINTS.get(loc, "required; set it in the config file or the environment")
        problems.append(f"{loc}: {msg}")
    env_hint = "fix it in the --config file, the RECOVERY_<SECTION>__<FIELD> variable or --set"
    return "invalid config: " + "; ".join(problems) + f" ({env_hint})"


def executor_params(settings: Settings, run_id: str) -> JobParams:
    """The frozen, picklable subset of settings that executors need."""
    rate = settings.claim.max_entries_per_s
    return JobParams(
        run_id=run_id,
        redis=redis_params(settings),
        min_idle_ms=settings.claim.min_idle_ms,
        count=settings.claim.count,
        max_deliveries=settings.claim.max_deliveries,
        dlq_suffix=settings.dead_letter.suffix,
        dlq_batch_size=settings.dead_letter.batch_size,
        handler_path=settings.handler.path or "",  # "": none (requeue, reassign, dry run)
        handler_batch_size=settings.handler.batch_size,
        handler_timeout_s=settings.handler.timeout_s,
        reprocess_mode=settings.reprocess.mode,
        requeue_stream=settings.reprocess.requeue_stream,
        live_within_ms=settings.reprocess.live_within_ms,
        consumer_prefix=settings.claim.consumer_prefix,
        backoff_factor=settings.claim.backoff_factor,
        backoff_max_ms=settings.claim.backoff_max_ms,
        max_entries_per_s_per_partition=(rate / settings.spark.partitions) if rate else None,
    )


def redis_params(settings: Settings) -> RedisParams:
    """The connection parameters of `settings` (the password in plain text: never log it)."""
    r = settings.redis
    return RedisParams(
        url=r.url,
        username=r.username,
        password=r.password.get_secret_value() if r.password else None,
        connect_timeout_s=r.connect_timeout_s,
        socket_timeout_s=r.socket_timeout_s,
        tls_ca_file=str(r.tls_ca_file) if r.tls_ca_file else None,
        tls_cert_file=str(r.tls_cert_file) if r.tls_cert_file else None,
        tls_key_file=str(r.tls_key_file) if r.tls_key_file else None,
        tls_check_hostname=r.tls_check_hostname,
        cluster=r.cluster,
    )


def _overrides_to_dict(overrides: list[str]) -> dict[str, Any]:
    """``["claim.count=10"]`` -> ``{"claim": {"count": "10"}}`` (pydantic coerces types)."""
    result: dict[str, Any] = {}
    for item in overrides:
        key, sep, value = item.partition("=")
        path = key.strip().split(".")
        if not sep or len(path) != 2 or not all(path):
            raise ConfigError(
                f"--set {item!r}: write it as section.field=value, e.g. claim.count=500")
        section, name = path
        parsed: Any = _list_value(item, value) if name in ("keys", "groups") else value
        result.setdefault(section, {})[name] = parsed
    return result


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


def strip_userinfo(url: str) -> str:
    """The URL without user name and password."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = host + (f":{parts.port}" if parts.port else "")
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


def _read_password(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8").rstrip("\r\n")
    except OSError as exc:
        raise ValueError(
            f"redis.password_file {path} cannot be read ({exc.strerror}): fix the path or its mode"
        ) from None


def redacted_url(url: str) -> str:
    """The URL with any password replaced by ``***`` (safe for logs)."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    user = quote(parts.username or "")
    host = parts.netloc.rsplit("@", 1)[1]
    return urlunsplit((parts.scheme, f"{user}:***@{host}", parts.path, parts.query, ""))
