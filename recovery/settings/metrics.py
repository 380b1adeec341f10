"""The ``[metrics]`` settings section: where a job pushes its metrics at the end of a run (a
Prometheus Pushgateway) and how it logs in. Off unless ``pushgateway_url`` is set."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from pydantic import Field, SecretStr, model_validator

from recovery.settings.base import Section


class MetricsSettings(Section):
    """A Pushgateway to push each run's metrics to (``recovery.metrics``), and its basic
    auth (each field's description)."""

    pushgateway_url: str | None = Field(None, description=(
        "`http://host:9091`: push each run's metrics to this Pushgateway; never a user or "
        "password in it; none: no push. [docs/OPERATIONS.md](docs/OPERATIONS.md#monitoring)"))
    job: str = Field("redis_stream_recovery", min_length=1, pattern=r"^[^/]+$", description=(
        "the push's grouping key, with `instance`; the job's kind (`recover`, "
        "`recover_dry_run`, ...) is added, so two deployments, two jobs or a dry run never "
        "overwrite each other's metrics"))
    instance: str = Field("default", min_length=1, pattern=r"^[^/]+$", description=(
        "the push's grouping key, with `job`"))
    max_units: int = Field(100, ge=0, le=10_000, description=(
        "(stream, group) series pushed at most, those with the most pending entries; the "
        "rest summed into one `(other)` series"))
    timeout_s: float = Field(10.0, gt=0, le=300, description=(
        "timeout of the whole push, connect to last byte (s)"))
    username: str | None = Field(None, description="basic auth user for the Pushgateway")
    password: SecretStr | None = Field(None, description=(
        "basic auth password: give it through `RECOVERY_METRICS__PASSWORD` or "
        "`password_file`; never printed"))
    password_file: Path | None = Field(None, description=(
        "a file holding the basic auth password, read when `password` is not set"))

    @model_validator(mode="before")
    @classmethod
    def _password_from_file(cls, data: Any) -> Any:
        """``password_file`` read into an unset password, before validation (frozen model)."""
        if not isinstance(data, dict) or data.get("password_file") is None \
                or data.get("password") is not None:
            return data
        path = Path(data["password_file"])
        try:
            password = path.read_text(encoding="utf-8").rstrip("\r\n")
        except OSError as exc:
            raise ValueError(f"metrics.password_file {path} cannot be read ({exc.strerror}): "
                             "fix the path or its mode") from None
        return {**data, "password": password}

    @model_validator(mode="after")
    def _url_shape(self) -> MetricsSettings:
        if self.pushgateway_url is None:
            return self
        try:
            parts = urlsplit(self.pushgateway_url)
            has_userinfo = "@" in parts.netloc
            _ = parts.port
        except ValueError:
            parts, has_userinfo = None, False
        if has_userinfo:  # the URL is logged: never a password in it (and never echo it)
            raise ValueError("metrics.pushgateway_url must not hold a user or password: set "
                             "metrics.username and RECOVERY_METRICS__PASSWORD or "
                             "metrics.password_file")
        if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("metrics.pushgateway_url must look like http://host:9091")
        if self.password is not None and self.username is None:
            raise ValueError("metrics.password is set without metrics.username: set both")
        return self
