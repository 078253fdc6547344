"""Options of the ``iceberg`` sink (Quix IcebergSink's names accepted as aliases).

Catalog properties that have no option of their own are passed through to pyiceberg's
``load_catalog`` as ``catalog.<key>`` options (e.g. ``catalog.s3.endpoint``); values of
keys that look like credentials (:func:`quixsinks.core.secrets.is_secret_name`) and URL
passwords are never shown.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from typing import ClassVar, Literal, TypeVar
from urllib.parse import urlparse

from quixsinks.core.errors import OptionError
from quixsinks.core.options import option
from quixsinks.core.secrets import is_secret_name
from quixsinks.core.sink import LedgerOptions
from quixsinks.core.tables.catalog import properties_key

__all__ = [
    "CATALOG_PREFIX",
    "CATALOG_TYPES",
    "IcebergOptions",
    "is_secret_property",
    "parse_duration",
]

#: option prefix of catalog properties passed through to pyiceberg
CATALOG_PREFIX = "catalog."
#: catalog types pyiceberg's ``load_catalog`` knows (``aws_glue`` is Quix's name for glue)
CATALOG_TYPES = ("sql", "rest", "glue", "hive", "dynamodb", "in-memory", "bigquery")
#: URI schemes of Azure storage locations
AZURE_SCHEMES = ("abfs", "abfss", "wasb", "wasbs")
_CATALOG_TYPE_ALIASES = {"aws_glue": "glue", "memory": "in-memory", "sqlite": "sql"}

#: a duration: a number and an optional unit (seconds without one)
_DURATION = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*([a-z]*)\s*$", re.IGNORECASE)
_UNITS = {
    "": 1,
    "s": 1,
    "sec": 1,
    "secs": 1,
    "second": 1,
    "seconds": 1,
    "m": 60,
    "min": 60,
    "mins": 60,
    "minute": 60,
    "minutes": 60,
    "h": 3600,
    "hour": 3600,
    "hours": 3600,
    "d": 86400,
    "day": 86400,
    "days": 86400,
    "w": 604800,
    "week": 604800,
    "weeks": 604800,
}

T = TypeVar("T", bound="IcebergOptions")


def parse_duration(text: str, option: str) -> float:
    """Seconds of a duration such as ``7d``, ``12h``, ``30m``, ``90s`` or ``3600``."""
    match = _DURATION.match(text)
    unit = match.group(2).lower() if match else ""
    if match is None or unit not in _UNITS:
        raise OptionError(
            f"iceberg: {option!r} has value {text!r}, expected a duration such as 7d, 12h, "
            "30m or 90s (a plain number is seconds)",
            option=option,
            value=text,
            allowed="a number with an optional unit s, m, h, d or w",
        )
    seconds = float(match.group(1)) * _UNITS[unit]
    if seconds <= 0:
        raise OptionError(
            f"iceberg: {option!r} has value {text!r}, expected a duration above zero",
            option=option,
            value=text,
        )
    return seconds


def is_secret_property(key: str) -> bool:
    """Whether a catalog property holds a credential (its value is never shown): the one
    rule of :func:`quixsinks.core.secrets.is_secret_name`."""
    return is_secret_name(key)


@dataclass(frozen=True, kw_only=True)
class IcebergOptions(LedgerOptions):
    sink_name: ClassVar[str] = "iceberg"

    table_name: str = option(
        doc="The table as namespace.table (nested namespaces: a.b.table)",
    )
    catalog_type: str = option(
        "sql",
        aliases=("data_catalog_spec",),
        doc="sql (embedded SQLite by default), rest, glue (Quix's aws_glue), or any other "
        "type pyiceberg's load_catalog takes (hive, dynamodb, in-memory)",
    )
    catalog_name: str = option(
        "quixsinks",
        doc="The catalog's name in pyiceberg (a SQL catalog keeps its tables per name: read "
        "them back under the same one)",
    )
    catalog_uri: str | None = option(
        None,
        secret=True,
        doc="The catalog's URI: a SQLAlchemy URL for sql (default: a SQLite file "
        "catalog.db in the warehouse directory), the server's URL for rest",
    )
    catalog_timeout_seconds: float = option(
        60.0,
        positive=True,
        doc="rest and glue: seconds to wait for the catalog to answer one request (and, "
        "at most 10 of them, to connect); a hung catalog fails the write or the commit",
    )
    warehouse: str | None = option(
        None,
        aliases=("aws_s3_uri",),
        doc="Where new tables' files go: a local directory, an s3:// URI (Quix's aws_s3_uri) "
        "or abfs://<container>/<path> (Azure: catalog.adls.* properties)",
    )
    aws_region: str | None = option(
        None, env="AWS_REGION", doc="glue and s3: the AWS region (default: AWS_REGION)"
    )
    aws_access_key_id: str | None = option(
        None, secret=True, env="AWS_ACCESS_KEY_ID", doc="glue and s3: access key id"
    )
    aws_secret_access_key: str | None = option(
        None, secret=True, env="AWS_SECRET_ACCESS_KEY", doc="glue and s3: secret access key"
    )
    aws_session_token: str | None = option(
        None, secret=True, env="AWS_SESSION_TOKEN", doc="glue and s3: session token"
    )
    aws_endpoint_url: str | None = option(
        None, doc="glue and s3: a non-AWS endpoint (e.g. a local S3-compatible server)"
    )
    create_namespace: bool = option(
        True, doc="Create the table's namespace when it is missing (false: fail instead)"
    )
    partition_by: str | None = option(
        None,
        doc="Partitioning of a new table: comma-separated transforms such as "
        "day(ts), bucket(16, id), truncate(4, name), identity(city) or a plain column; "
        "default: identity(_key), day(_timestamp) when both columns exist, else none",
    )
    schema_mode: Literal["evolve", "freeze"] = option(
        "evolve",
        doc="evolve: add new columns and widen types safely (union by name); freeze: a "
        "DataFrame that does not fit the table's schema fails before any data moves",
    )
    commit_max_attempts: int = option(
        10,
        minimum=1,
        doc="Catalog commits tried per micro-batch on a conflict or an unknown outcome (each "
        "one refreshes the table and checks whether the batch landed first)",
    )
    keep_snapshots: int | None = option(
        None,
        minimum=1,
        doc="Expire snapshots beyond this many of the newest once there are twice as many "
        "(keeps commit time flat); with expire_snapshots_older_than, the least kept; "
        "default: keep all",
    )
    expire_snapshots_older_than: str | None = option(
        None,
        doc="Expire snapshots older than this (e.g. 7d, 12h, 30m, 90s; a plain number is "
        "seconds), beyond the newest keep_snapshots; the newest snapshot of each streaming "
        "sink id (its ledger entry) is never expired; default: no age limit",
    )
    catalog_properties: tuple[tuple[str, str], ...] = field(default=(), repr=False)

    @classmethod
    def from_options(cls: type[T], options: Mapping[str, str]) -> T:
        passthrough: dict[str, str] = {}
        rest: dict[str, str] = {}
        for key, value in options.items():
            if key.lower().startswith(CATALOG_PREFIX) and len(key) > len(CATALOG_PREFIX):
                passthrough[key[len(CATALOG_PREFIX) :]] = value
            else:
                rest[key] = value
        parsed = super().from_options(rest)
        normal = _CATALOG_TYPE_ALIASES.get(parsed.catalog_type.lower(), parsed.catalog_type.lower())
        result = dataclasses.replace(
            parsed, catalog_type=normal, catalog_properties=tuple(sorted(passthrough.items()))
        )
        result._check_azure_warehouse()  # needs the pass-through properties
        return result

    def validate(self) -> None:
        super().validate()
        parts = self.table_name.split(".")
        if len(parts) < 2 or not all(p.strip() for p in parts):
            raise OptionError(
                f"iceberg: 'table_name' {self.table_name!r} must be namespace.table "
                "(e.g. analytics.events)",
                option="table_name",
                value=self.table_name,
            )
        for part in parts:
            # catalogs put namespaces and tables in paths (<warehouse>/<ns>.db/<table>) and
            # URLs: a separator or a control character there would name another place
            bad = next((c for c in part if c in "/\\" or not c.isprintable()), None)
            if bad is not None:
                raise OptionError(
                    f"iceberg: 'table_name' {self.table_name!r}: {part!r} holds {bad!r}; "
                    "namespace and table names may not hold '/', '\\' or control characters",
                    option="table_name",
                    value=self.table_name,
                )
        kind = _CATALOG_TYPE_ALIASES.get(self.catalog_type.lower(), self.catalog_type.lower())
        if kind not in CATALOG_TYPES:
            raise OptionError(
                f"iceberg: unknown catalog_type {self.catalog_type!r}; allowed: "
                f"{', '.join(CATALOG_TYPES)} (aws_glue means glue)",
                option="catalog_type",
                value=self.catalog_type,
                allowed=CATALOG_TYPES,
            )
        if kind == "sql" and self.warehouse is None and self.catalog_uri is None:
            raise OptionError(
                "iceberg: the embedded sql catalog needs 'warehouse' (a local directory, "
                "e.g. /data/warehouse, or an s3:// URI); its SQLite catalog file goes there",
                option="warehouse",
            )
        if self.expire_snapshots_older_than is not None:
            parse_duration(self.expire_snapshots_older_than, "expire_snapshots_older_than")
        if kind == "rest" and self.catalog_uri is None:
            raise OptionError(
                "iceberg: catalog_type=rest needs 'catalog_uri' (the REST catalog's URL)",
                option="catalog_uri",
            )

    def _check_azure_warehouse(self) -> None:
        """pyiceberg's pyarrow FileIO (the default here) reads an Azure location as
        ``abfs://<container>/<path>``; the ``container@account.host`` form fails deep in
        the first write: refuse it now, saying what to write."""
        if self.warehouse is None:
            return
        parsed = urlparse(self.warehouse)
        io_impl = dict(self.catalog_properties).get("py-io-impl", "")
        if (
            parsed.scheme in AZURE_SCHEMES
            and "@" in parsed.netloc
            and (not io_impl or io_impl.endswith("PyArrowFileIO"))
        ):
            container, _, host = parsed.netloc.partition("@")
            account = host.split(".")[0]
            raise OptionError(
                f"iceberg: warehouse {self.warehouse!r}: pyiceberg's pyarrow FileIO reads "
                f"Azure locations as {parsed.scheme}://<container>/<path>: write "
                f"{parsed.scheme}://{container}{parsed.path} with "
                f"catalog.adls.account-name={account} (and catalog.adls.account-key or "
                "catalog.adls.sas-token), or use pyiceberg's fsspec FileIO "
                "(catalog.py-io-impl=pyiceberg.io.fsspec.FsspecFileIO, pip install adlfs)",
                option="warehouse",
                value=self.warehouse,
            )

    def catalog_properties_key(self) -> tuple[Hashable, ...]:
        """The pass-through catalog properties as part of a cache key (credentials only as
        a digest): :func:`~quixsinks.core.clients.client_key` covers the declared options."""
        return properties_key(self.catalog_properties, self.secret_values())

    @property
    def expire_older_than_seconds(self) -> float | None:
        """``expire_snapshots_older_than`` in seconds (None: no age limit)."""
        text = self.expire_snapshots_older_than
        return None if text is None else parse_duration(text, "expire_snapshots_older_than")

    @property
    def namespace(self) -> tuple[str, ...]:
        return tuple(self.table_name.split(".")[:-1])
