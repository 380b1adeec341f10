"""The ``[redis]`` settings section: where Redis is and how to log in, and the URL helpers
that keep a password out of every log line."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal
from urllib.parse import quote, unquote, urlsplit, urlunsplit

from pydantic import Field, SecretStr, model_validator

from recovery.settings.base import Section


class RedisSettings(Section):
    """Where Redis is and how to log in."""

    url: str = Field("redis://127.0.0.1:6379/0", description=(
        "`redis://host:port/db`, or `rediss://` for TLS; a user and password in it are moved "
        "out of it (into `username` and `password`), never printed"))
    username: str | None = Field(None, description="ACL user name; none: the default user")
    password: SecretStr | None = Field(None, description=(
        "ACL password: give it through `RECOVERY_REDIS__PASSWORD` or `password_file`, never on "
        "the command line; it is never printed or logged"))
    password_file: Path | None = Field(None, description=(
        "a file holding the password (one line), read when `password` is not set"))
    connect_timeout_s: float = Field(5.0, gt=0, le=300, description="connection timeout (s)")
    socket_timeout_s: float = Field(30.0, gt=0, le=3600, description=(
        "reply timeout (s): the longest the server may stay silent, and the time a request or "
        "reply may take before `min_transfer_bytes_per_s` adds to it"))
    min_transfer_bytes_per_s: float = Field(65536.0, gt=0, description=(
        "the slowest link taken as working (bytes/s): a request must be sent whole, and each "
        "reply read whole once the job waits for it, within `socket_timeout_s` plus 1 s per "
        "this many bytes it holds, else the call is a timeout like a silent server's "
        "(retried, then exit 1): a server or proxy answering a byte at a time cannot hold a "
        "call for hours, and a 64 MB reply may take 17 minutes at the default; see "
        "[Timeouts](docs/GUARANTEES.md#timeouts)"))
    tls_ca_file: Path | None = Field(None, description=(
        "PEM file of the CA(s) that signed the server's certificate (`rediss://`); none: the "
        "system's CAs; see [TLS](docs/CLUSTER_TLS.md#tls)"))
    tls_cert_file: Path | None = Field(None, description=(
        "client certificate, for servers with `tls-auth-clients yes` (or `optional`)"))
    tls_key_file: Path | None = Field(None, description="the client certificate's key")
    tls_check_hostname: bool = Field(True, description=(
        "the server's certificate must name the host of `url` (subjectAltName DNS or IP). "
        "`false` skips only this name check: the certificate must still be signed by a "
        "trusted CA (the chain is always verified)"))
    cluster: bool | Literal["auto"] = Field("auto", description=(
        "Redis Cluster client: `\"auto\"`: each client asks the server when it opens (INFO "
        "cluster, `cluster_enabled:1`; one extra round trip); `true`: always a cluster client "
        "(skips the question); `false`: always a single-server client, e.g. behind a proxy "
        "that hides the cluster"))

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
        if db and not (db.isascii() and db.isdigit()):  # redis-py reads "²" as no db: 0
            raise ValueError(
                f"redis.url names database {db!r}: it must be a number, e.g. redis://host:6379/0"
            )
        return self


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
