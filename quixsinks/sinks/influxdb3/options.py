"""Options of the ``influxdb3`` sink (Quix InfluxDB3Sink's names, snake_case or camelCase)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

from quixsinks.core.errors import OptionError
from quixsinks.core.options import option
from quixsinks.core.sink import CommonOptions

from .lineprotocol import Precision, check_names

__all__ = ["InfluxDB3Options"]


@dataclass(frozen=True, kw_only=True)
class InfluxDB3Options(CommonOptions):
    sink_name: ClassVar[str] = "influxdb3"

    host: str = option(doc="Server URL, e.g. https://us-east-1-1.aws.cloud2.influxdata.com")
    token: str | None = option(
        None, secret=True, env="INFLUXDB_TOKEN", doc="API token (default: INFLUXDB_TOKEN)"
    )
    organization_id: str = option("", doc="Organization (InfluxDB Cloud; ignored by 3 Core)")
    database: str = option(doc="Database (bucket) to write to")
    measurement: str | None = option(None, doc="Measurement name (or measurement_column)")
    measurement_column: str | None = option(
        None, doc="Column whose value is each row's measurement"
    )
    fields_keys: tuple[str, ...] = option(
        (), doc="Comma-separated field columns; empty: every value column not a tag or time"
    )
    tags_keys: tuple[str, ...] = option(
        (), doc="Comma-separated tag columns (sorted; values written as strings)"
    )
    time_key: str | None = option(
        None,
        aliases=("time_setter",),
        doc="Column with the point time (timestamp, or integer epoch in time_precision); "
        "default: the record timestamp",
    )
    time_precision: Precision = option("ms", doc="Precision of the written times")
    include_metadata_tags: bool = option(False, doc="Add the tags __key, __topic and __partition")
    allow_missing_fields: bool = option(
        False, doc="Skip fields_keys the DataFrame lacks instead of failing"
    )
    convert_ints_to_floats: bool = option(
        False, doc="Write integer fields as floats (avoids int/float type conflicts)"
    )
    invalid_floats: Literal["error", "drop"] = option(
        "error", doc="NaN or infinity in a field: fail the batch, or leave the field out"
    )
    decimal_fields: Literal["float", "string"] = option(
        "float",
        doc="Decimal fields: float (rounded to the nearest double) or string (exact digits)",
    )
    batch_size: int = option(
        1000, minimum=1, doc="Lines per write request (the vendor advises about 10,000)"
    )
    enable_gzip: bool = option(True, doc="gzip request bodies (level 1: fast)")
    request_timeout_ms: int = option(10_000, minimum=1, doc="HTTP timeout of one request")
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
        if (self.measurement is None) == (self.measurement_column is None):
            raise OptionError(
                "influxdb3: give exactly one of 'measurement' and 'measurement_column'",
                option="measurement",
            )
        if self.measurement is not None and not self.measurement.strip():
            raise OptionError(
                "influxdb3: 'measurement' is empty", option="measurement", value=self.measurement
            )
        check_names(self.tags_keys, self.fields_keys)
        if not self.host.startswith(("http://", "https://")):
            raise OptionError(
                f"influxdb3: 'host' must be an http:// or https:// URL, got {self.host!r}",
                option="host",
                value=self.host,
            )
