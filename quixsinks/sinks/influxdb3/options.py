"""Options of the ``influxdb3`` sink (Quix InfluxDB3Sink's names, snake_case or camelCase);
the point options (measurement, tags, fields, time) are :class:`.points.PointOptions`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from quixsinks.core.errors import OptionError
from quixsinks.core.options import option

from .points import PointOptions

__all__ = ["InfluxDB3Options"]


@dataclass(frozen=True, kw_only=True)
class InfluxDB3Options(PointOptions):
    sink_name: ClassVar[str] = "influxdb3"

    host: str = option(doc="Server URL, e.g. https://us-east-1-1.aws.cloud2.influxdata.com")
    token: str | None = option(
        None, secret=True, env="INFLUXDB_TOKEN", doc="API token (default: INFLUXDB_TOKEN)"
    )
    organization_id: str = option("", doc="Organization (InfluxDB Cloud; ignored by 3 Core)")
    database: str = option(doc="Database (bucket) to write to")
    enable_gzip: bool = option(True, doc="gzip request bodies (level 1: fast)")
    verify_ssl: bool = option(
        True,
        doc="Verify the server's TLS certificate and host name (every request, the start-up "
        "ping included); false: encrypted but unauthenticated, for tests only",
    )
    ssl_ca_cert: str | None = option(
        None,
        doc="CA bundle file (PEM) to verify the server's certificate with, for a private or "
        "self-signed CA; default: the system's CAs. The path must exist on the driver and "
        "on every executor",
    )
    raise_on_retention_violation: bool = option(
        False, doc="HTTP 422 (points outside the retention period): fail instead of skipping"
    )
    debug: bool = option(False, doc="Log the client's HTTP traffic (never the token)")

    def validate(self) -> None:
        super().validate()
        if not self.host.startswith(("http://", "https://")):
            raise OptionError(
                f"influxdb3: 'host' must be an http:// or https:// URL, got {self.host!r}",
                option="host",
                value=self.host,
            )
