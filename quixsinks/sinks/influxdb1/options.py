"""Options of the ``influxdb1`` sink: Quix InfluxDB1Sink's names (snake_case or camelCase),
plus ``ssl``/``verify_ssl``/``ssl_ca_cert``, ``retention_policy``, ``consistency``,
``auth_method`` and ``enable_gzip``. The point options (measurement, tags, fields, time)
are the shared :class:`~quixsinks.sinks.influxdb3.points.PointOptions`."""

from __future__ import annotations

import urllib.parse
from dataclasses import dataclass
from typing import ClassVar, Literal

from quixsinks.core.errors import OptionError
from quixsinks.core.options import option
from quixsinks.sinks.influxdb3.points import PointOptions

__all__ = ["InfluxDB1Options"]

#: ``time_precision`` -> the 1.x ``precision`` query parameter
PRECISION_PARAMETER = {"ns": "n", "us": "u", "ms": "ms", "s": "s"}


@dataclass(frozen=True, kw_only=True)
class InfluxDB1Options(PointOptions):
    sink_name: ClassVar[str] = "influxdb1"

    host: str = option(
        doc="Server host name or address, as in Quix (an http:// or https:// URL is accepted "
        "too: its scheme sets ssl, its port overrides port)"
    )
    port: int = option(8086, minimum=1, maximum=65535, doc="Server port")
    database: str = option(doc="Database to write to (it must exist)")
    username: str | None = option(None, doc="User name (the server's auth-enabled setting)")
    password: str | None = option(None, secret=True, doc="Password of username")
    auth_method: Literal["basic", "query"] = option(
        "basic",
        doc="How credentials travel: basic (an Authorization header) or query (u and p "
        "query parameters, for proxies that strip the header)",
    )
    retention_policy: str | None = option(
        None, doc="Retention policy to write into (rp); default: the database's default policy"
    )
    consistency: Literal["any", "one", "quorum", "all"] | None = option(
        None, doc="Write consistency (InfluxDB Enterprise clusters; open source ignores it)"
    )
    ssl: bool = option(False, doc="Connect with https")
    verify_ssl: bool = option(
        True,
        doc="Verify the server's TLS certificate and host name (every request, the start-up "
        "checks included); false: encrypted but unauthenticated, for tests only",
    )
    ssl_ca_cert: str | None = option(
        None,
        doc="CA bundle file (PEM) to verify the server's certificate with, for a private or "
        "self-signed CA; default: the system's CAs. The path must exist on the driver and "
        "on every executor",
    )
    enable_gzip: bool = option(
        False,
        doc="gzip request bodies (level 1); off as in Quix: on a local network the server "
        "and the sink spend more CPU on it than the link saves (see the benchmark)",
    )

    def validate(self) -> None:
        super().validate()
        if not self.host.strip():
            raise OptionError("influxdb1: 'host' is empty", option="host", value=self.host)
        if "://" in self.host:
            parsed = urllib.parse.urlsplit(self.host)
            if parsed.scheme not in ("http", "https") or not parsed.hostname:
                raise OptionError(
                    f"influxdb1: 'host' must be a host name or an http:// or https:// URL, "
                    f"got {self.host!r}",
                    option="host",
                    value=self.host,
                )
            if parsed.username or parsed.password:
                raise OptionError(
                    "influxdb1: 'host' must not carry credentials; set 'username' and 'password'",
                    option="host",
                )
            if parsed.scheme == "http" and self.ssl:
                raise OptionError(
                    f"influxdb1: 'host' {self.host!r} says http:// but 'ssl' is true; use an "
                    "https:// URL, or a host name with ssl=true",
                    option="ssl",
                )
            if parsed.path.strip("/") or parsed.query:
                raise OptionError(
                    f"influxdb1: 'host' must be a server address without a path, got {self.host!r}",
                    option="host",
                    value=self.host,
                )
        elif any(c in self.host for c in "/?#@ "):
            raise OptionError(
                f"influxdb1: 'host' {self.host!r} is not a host name; give a name or address "
                "(and 'port'), or an http:// or https:// URL",
                option="host",
                value=self.host,
            )
        if (self.username is None) != (self.password is None):
            given, missing = (
                ("username", "password")
                if self.password is None
                else (
                    "password",
                    "username",
                )
            )
            raise OptionError(
                f"influxdb1: {given!r} is set but {missing!r} is not; give both, or neither "
                "for a server without authentication",
                option=missing,
            )

    @property
    def url(self) -> str:
        """The server's base URL, e.g. ``https://influx.example.com:8086`` (no secret)."""
        if "://" in self.host:
            parsed = urllib.parse.urlsplit(self.host)
            hostname = parsed.hostname or ""
            port = parsed.port or self.port
            scheme = parsed.scheme
        else:
            hostname, port, scheme = self.host, self.port, "https" if self.ssl else "http"
        if ":" in hostname:  # an IPv6 address
            hostname = f"[{hostname}]"
        return f"{scheme}://{hostname}:{port}"

    @property
    def uses_tls(self) -> bool:
        return self.url.startswith("https://")

    def write_parameters(self) -> dict[str, str]:
        """The query parameters of ``/write`` (credentials excluded)."""
        parameters = {"db": self.database, "precision": PRECISION_PARAMETER[self.time_precision]}
        if self.retention_policy:
            parameters["rp"] = self.retention_policy
        if self.consistency:
            parameters["consistency"] = self.consistency
        return parameters
