"""Catalogs and FileIOs of the table layer: loaded with timeouts, cached per process.

A sink describes its catalog with a :class:`TableCatalog` (built from its own options:
``iceberg``'s catalog options, ``tsdatalake``'s ``catalog_url``); :func:`load_catalog`
opens it once per process (a bounded :class:`~quixsinks.core.clients.ClientCache` keyed
without secrets), :func:`load_io` does the same for a table's FileIO on the executors.

Every call to a REST or Glue catalog has a timeout: a REST catalog is a
:class:`~quixsinks.core.tables.pyiceberg_compat.TimeoutRestCatalog` (pyiceberg sets no
timeout on its HTTP calls), and a Glue catalog's boto3 client gets botocore's connect and
read timeouts through a botocore session whose default client config carries them.

:func:`catalog_error` is the one error boundary of catalog calls: a pyiceberg or transport
exception becomes a :class:`~quixsinks.core.errors.DestinationError` (by its class: not
found, access denied, or any other), secrets scrubbed, a timeout named with its option.
"""

from __future__ import annotations

import os
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol
from urllib.parse import urlparse

import pyarrow as pa

from quixsinks.core.clients import ClientCache, connect_timeout, secret_digest
from quixsinks.core.errors import (
    DestinationAccessDeniedError,
    DestinationError,
    DestinationNotFoundError,
    MissingDependencyError,
    timed_out,
)
from quixsinks.core.ledger import DEFAULT_KEEP_BATCHES, Ledger, LedgerStore
from quixsinks.core.secrets import is_secret_name, mask_value, scrub
from quixsinks.core.vendors.http import import_client

__all__ = [
    "PYARROW_FILE_IO",
    "PYARROW_FLOOR",
    "TIMEOUT_PROPERTY",
    "AwsCredentials",
    "TableCatalog",
    "catalog_error",
    "forget_catalog",
    "import_pyiceberg",
    "is_timeout",
    "load_catalog",
    "load_io",
    "local_dir",
    "properties_key",
    "s3_properties",
]

# the oldest pyarrow pyiceberg's writer works with (pyiceberg[pyarrow] declares it too)
PYARROW_FLOOR = 17
#: catalog property of :class:`~quixsinks.core.tables.pyiceberg_compat.TimeoutRestCatalog`:
#: the seconds of ``catalog_timeout_seconds``
TIMEOUT_PROPERTY = "quixsinks.timeout-seconds"
#: the FileIO the table layer reads and writes with unless ``py-io-impl`` says otherwise
PYARROW_FILE_IO = "pyiceberg.io.pyarrow.PyArrowFileIO"


def import_pyiceberg() -> Any:
    """pyiceberg, or MissingDependencyError naming the ``iceberg`` extra."""
    pyiceberg = import_client("pyiceberg", package="pyiceberg", extra="iceberg")
    import_client("pyiceberg.catalog", package="pyiceberg", extra="iceberg")
    if int(pa.__version__.split(".")[0]) < PYARROW_FLOOR:
        # pyiceberg's writer calls pyarrow APIs of 17+; without this check the first write fails
        # deep in its schema visitor
        found = f"pyarrow {pa.__version__}"
        raise MissingDependencyError(f"pyarrow>={PYARROW_FLOOR}", "iceberg", found=found)
    return pyiceberg


def local_dir(location: str) -> str | None:
    """The local directory of a warehouse location, or None for an object store."""
    parsed = urlparse(location)
    if parsed.scheme in ("", "file"):
        return os.path.abspath(parsed.path if parsed.scheme else location)
    return None


def properties_key(
    properties: Iterable[tuple[str, Any]], secrets: Iterable[str] = ()
) -> tuple[Hashable, ...]:
    """A cache key of catalog or FileIO properties: credentials (by name, by value, URL
    passwords) only as a digest; values that are not text (a botocore session) left out."""
    hidden = set(secrets)
    key: list[Hashable] = []
    for name, value in sorted(properties, key=lambda item: item[0]):
        if not isinstance(value, str):
            continue
        if is_secret_name(name) or value in hidden or mask_value(value) != value:
            value = secret_digest(value)
        key.append((name, value))
    return tuple(key)


class AwsCredentials(Protocol):
    """The AWS credential options a sink's options hold under these names."""

    @property
    def aws_access_key_id(self) -> str | None: ...
    @property
    def aws_secret_access_key(self) -> str | None: ...
    @property
    def aws_session_token(self) -> str | None: ...


def s3_properties(
    options: AwsCredentials, *, region: str | None, endpoint: str | None, glue: bool = False
) -> dict[str, str]:
    """S3 (and, for a Glue catalog, Glue) credentials under pyiceberg's property names."""
    values = {
        "region": region,
        "access-key-id": options.aws_access_key_id,
        "secret-access-key": options.aws_secret_access_key,
        "session-token": options.aws_session_token,
        "endpoint": endpoint,
    }
    props: dict[str, str] = {}
    for name, value in values.items():
        if value is not None:
            props[f"s3.{name}"] = value
            if glue:
                props[f"glue.{name}"] = value
    if endpoint is not None and endpoint.startswith("http://"):
        props["s3.force-virtual-addressing"] = "false"
    return props


@dataclass(frozen=True)
class TableCatalog:
    """One catalog and the commit rules of the tables a sink keeps in it.

    Attributes:
        sink: the sink's name, first word of every log line and error.
        name: the catalog's name in pyiceberg.
        properties: ``load_catalog`` properties (``type`` first; credentials included:
            never shown, never a cache key).
        timeout_seconds: the longest one catalog request waits for an answer.
        timeout_option: the option that sets it (named when a call timed out).
        commit_max_attempts: catalog commits tried per micro-batch (:mod:`.commit`).
        keep_snapshots: snapshots kept by expiry (:mod:`.expiry`); None: keep all.
        takeover_query_id: the fenced ledger's takeover (``takeover_query_id``).
        ledger_keep_batches: the ledger's ``keep_batches``.
        secrets: every secret of the sink's options (scrubbed out of errors and logs).
    """

    sink: str
    name: str
    properties: tuple[tuple[str, str], ...] = field(repr=False)
    timeout_seconds: float
    timeout_option: str = "catalog_timeout_seconds"
    commit_max_attempts: int = 10
    keep_snapshots: int | None = None
    takeover_query_id: str | None = None
    ledger_keep_batches: int = DEFAULT_KEEP_BATCHES
    secrets: tuple[str, ...] = field(default=(), repr=False)

    @property
    def catalog_type(self) -> str:
        return dict(self.properties).get("type", "")

    @property
    def key(self) -> tuple[Hashable, ...]:
        """The catalog cache's key: no raw secret in it."""
        return (self.name, properties_key(self.properties, self.secrets))

    def ledger(self, store: LedgerStore) -> Ledger:
        """The fenced ledger over a loaded table's snapshot summaries."""
        return Ledger(
            store,
            takeover_query_id=self.takeover_query_id,
            keep_batches=self.ledger_keep_batches,
        )

    def scrub(self, text: str) -> str:
        """``text`` without any of the sink's secrets."""
        return scrub(text, self.secrets)


def _close(client: Any) -> None:
    close = getattr(client, "close", None)
    if callable(close):
        close()


_CATALOGS: ClientCache[Any] = ClientCache("iceberg catalogs", _close, max_size=8)
_IOS: ClientCache[Any] = ClientCache("iceberg file IOs", lambda _io: None, max_size=16)


def load_catalog(catalog: TableCatalog) -> Any:
    """The process's pyiceberg catalog for ``catalog`` (opened on first use)."""
    return _CATALOGS.get(catalog.key, lambda: _open(catalog))


def _open(catalog: TableCatalog) -> Any:
    import_pyiceberg()
    from pyiceberg.catalog import load_catalog as pyiceberg_load_catalog

    props = dict(catalog.properties)
    local = local_dir(props["warehouse"]) if "warehouse" in props else None
    if local is not None:  # the SQLite catalog file goes there
        os.makedirs(local, exist_ok=True)
    if props.get("type") == "rest" and "py-catalog-impl" not in props:
        from .pyiceberg_compat import TimeoutRestCatalog

        rest = {k: v for k, v in props.items() if k != "type"}
        return TimeoutRestCatalog(catalog.name, **rest)
    if props.get("type") == "glue":
        glue = {**props, "botocore_session": _botocore_session(catalog.timeout_seconds)}
        return pyiceberg_load_catalog(catalog.name, **glue)
    return pyiceberg_load_catalog(catalog.name, **props)


def _botocore_session(seconds: float) -> Any:
    """A botocore session whose clients have the catalog's connect and read timeouts
    (pyiceberg's Glue client merges its retry settings into this default config)."""
    import botocore.session
    from botocore.config import Config

    session = botocore.session.get_session()
    session.set_default_client_config(
        Config(connect_timeout=connect_timeout(seconds), read_timeout=seconds)
    )
    return session


def forget_catalog(catalog: TableCatalog) -> None:
    """Drop the cached catalog (after a connection-level failure)."""
    _CATALOGS.discard(catalog.key)


def load_io(properties: Mapping[str, str], location: str) -> Any:
    """The process's FileIO for a table's properties."""

    def create() -> Any:
        from pyiceberg.io import load_file_io

        return load_file_io(dict(properties), location)

    return _IOS.get((location, properties_key(properties.items())), create)


def is_timeout(exc: BaseException | None) -> bool:
    """Whether a catalog call failed for want of an answer in time (a requests timeout of a
    REST catalog, a botocore one of Glue)."""
    if isinstance(exc, TimeoutError):
        return True
    try:
        import requests

        if isinstance(exc, requests.Timeout):
            return True
    except ImportError:  # pragma: no cover - pyiceberg depends on requests
        pass
    try:
        from botocore.exceptions import ConnectTimeoutError, ReadTimeoutError
    except ImportError:
        return False
    return isinstance(exc, (ConnectTimeoutError, ReadTimeoutError))


def _error_class(exc: BaseException) -> type[DestinationError]:
    """The quixsinks error of a catalog exception, by its pyiceberg class."""
    try:
        from pyiceberg.exceptions import (
            ForbiddenError,
            NoSuchNamespaceError,
            NoSuchTableError,
            UnauthorizedError,
        )
    except ImportError:  # pragma: no cover - only called after a pyiceberg call failed
        return DestinationError
    if isinstance(exc, (NoSuchTableError, NoSuchNamespaceError)):
        return DestinationNotFoundError
    if isinstance(exc, (ForbiddenError, UnauthorizedError)):
        return DestinationAccessDeniedError
    return DestinationError


def catalog_error(
    exc: BaseException, catalog: TableCatalog, message: str, location: str
) -> DestinationError:
    """The error of a failed catalog call: ``<message>: <exception, scrubbed>``, a timeout
    named with its option (see the module docstring)."""
    text = catalog.scrub(f"{type(exc).__name__}: {exc}")
    if is_timeout(exc):
        text = f"{timed_out(catalog.timeout_seconds, catalog.timeout_option)}: {text}"
    return _error_class(exc)(f"{message}: {text}", location=location)
