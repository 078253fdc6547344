"""pyiceberg catalogs and FileIOs from the sink's options, cached per process.

:func:`catalog_properties` turns the options into ``load_catalog`` properties (the
embedded default: a SQLite ``SqlCatalog`` in the warehouse directory; S3 and Glue
credentials under pyiceberg's property names; ``catalog.<key>`` pass-through last).
Files are read and written with pyiceberg's pyarrow FileIO unless ``catalog.py-io-impl``
says otherwise.

Every call to a REST or Glue catalog has a timeout (``catalog_timeout_seconds``): a REST
catalog is a :class:`~quixsinks.sinks.iceberg.rest.TimeoutRestCatalog` (pyiceberg sets no
timeout on its HTTP calls), and a Glue catalog's boto3 client gets botocore's connect and
read timeouts through a botocore session whose default client config carries them.
"""

from __future__ import annotations

import os
import threading
from typing import Any
from urllib.parse import urlparse

import pyarrow as pa

from quixsinks.core.clients import connect_timeout
from quixsinks.core.errors import MissingDependencyError

from .options import IcebergOptions

__all__ = [
    "TIMEOUT_PROPERTY",
    "catalog_properties",
    "import_pyiceberg",
    "is_timeout",
    "load_catalog",
    "load_io",
]

# the oldest pyarrow pyiceberg's writer works with (pyiceberg[pyarrow] declares it too)
PYARROW_FLOOR = 17

#: catalog property of :class:`~quixsinks.sinks.iceberg.rest.TimeoutRestCatalog`: the seconds
#: of ``catalog_timeout_seconds``
TIMEOUT_PROPERTY = "quixsinks.timeout-seconds"

_LOCK = threading.Lock()
_CATALOGS: dict[tuple[tuple[str, str], ...], Any] = {}
_IOS: dict[tuple[tuple[str, str], ...], Any] = {}


def import_pyiceberg() -> Any:
    try:
        import pyiceberg
        import pyiceberg.catalog
    except ImportError:
        raise MissingDependencyError("pyiceberg", "iceberg") from None
    if int(pa.__version__.split(".")[0]) < PYARROW_FLOOR:
        # pyiceberg's writer calls pyarrow APIs of 17+; without this check the first write fails
        # deep in its schema visitor
        found = f"pyarrow {pa.__version__}"
        raise MissingDependencyError(f"pyarrow>={PYARROW_FLOOR}", "iceberg", found=found)
    return pyiceberg


def _local_dir(location: str) -> str | None:
    """The local directory of a warehouse location, or None for an object store."""
    parsed = urlparse(location)
    if parsed.scheme in ("", "file"):
        return os.path.abspath(parsed.path if parsed.scheme else location)
    return None


def catalog_properties(opts: IcebergOptions) -> dict[str, str]:
    """The ``load_catalog`` properties of these options."""
    props: dict[str, str] = {"type": opts.catalog_type}
    passthrough = dict(opts.catalog_properties)
    if opts.warehouse is not None:
        local = _local_dir(opts.warehouse)
        props["warehouse"] = f"file://{local}" if local is not None else opts.warehouse
    if opts.catalog_uri is not None:
        props["uri"] = opts.catalog_uri
    elif opts.catalog_type == "sql" and opts.warehouse is not None:
        local = _local_dir(opts.warehouse)
        if local is not None:
            props["uri"] = f"sqlite:///{local}/catalog.db"
    aws = {
        "region": opts.aws_region,
        "access-key-id": opts.aws_access_key_id,
        "secret-access-key": opts.aws_secret_access_key,
        "session-token": opts.aws_session_token,
        "endpoint": opts.aws_endpoint_url,
    }
    for name, value in aws.items():
        if value is not None:
            props[f"s3.{name}"] = value
            if opts.catalog_type == "glue":
                props[f"glue.{name}"] = value
    if opts.aws_endpoint_url is not None and opts.aws_endpoint_url.startswith("http://"):
        props.setdefault("s3.force-virtual-addressing", "false")
    props["py-io-impl"] = "pyiceberg.io.pyarrow.PyArrowFileIO"
    props[TIMEOUT_PROPERTY] = f"{opts.catalog_timeout_seconds:g}"
    props.update(passthrough)
    return props


def prepare_warehouse(opts: IcebergOptions) -> None:
    """Create a local warehouse directory (the SQLite catalog file goes there)."""
    if opts.warehouse is not None:
        local = _local_dir(opts.warehouse)
        if local is not None:
            os.makedirs(local, exist_ok=True)


def load_catalog(opts: IcebergOptions) -> Any:
    """The process's catalog for these options (created on first use)."""
    props = catalog_properties(opts)
    key = tuple(sorted(props.items()))
    with _LOCK:
        catalog = _CATALOGS.get(key)
        if catalog is None:
            import_pyiceberg()
            from pyiceberg.catalog import load_catalog as pyiceberg_load_catalog

            prepare_warehouse(opts)
            if props.get("type") == "rest" and "py-catalog-impl" not in props:
                from .rest import TimeoutRestCatalog

                rest = {k: v for k, v in props.items() if k != "type"}
                catalog = TimeoutRestCatalog(opts.catalog_name, **rest)
            elif props.get("type") == "glue":
                glue = {**props, "botocore_session": _botocore_session(opts)}
                catalog = pyiceberg_load_catalog(opts.catalog_name, **glue)
            else:
                catalog = pyiceberg_load_catalog(opts.catalog_name, **props)
            _CATALOGS[key] = catalog
        return catalog


def _botocore_session(opts: IcebergOptions) -> Any:
    """A botocore session whose clients have the catalog's connect and read timeouts
    (pyiceberg's Glue client merges its retry settings into this default config)."""
    import botocore.session
    from botocore.config import Config

    seconds = opts.catalog_timeout_seconds
    session = botocore.session.get_session()
    session.set_default_client_config(
        Config(connect_timeout=connect_timeout(seconds), read_timeout=seconds)
    )
    return session


def forget_catalog(opts: IcebergOptions) -> None:
    """Drop the cached catalog (after a connection-level failure)."""
    key = tuple(sorted(catalog_properties(opts).items()))
    with _LOCK:
        _CATALOGS.pop(key, None)


def load_io(properties: tuple[tuple[str, str], ...], location: str) -> Any:
    """The process's FileIO for a table's properties."""
    with _LOCK:
        io = _IOS.get(properties)
        if io is None:
            from pyiceberg.io import load_file_io

            io = load_file_io(dict(properties), location)
            _IOS[properties] = io
        return io


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
