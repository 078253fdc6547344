"""The ``iceberg`` sink's catalog: its options as a :class:`TableCatalog`, and the one
error boundary of its catalog calls.

:func:`catalog_properties` turns the options into ``load_catalog`` properties (the
embedded default: a SQLite ``SqlCatalog`` in the warehouse directory; S3 and Glue
credentials under pyiceberg's property names; ``catalog.<key>`` pass-through last).
Files are read and written with pyiceberg's pyarrow FileIO unless ``catalog.py-io-impl``
says otherwise. Loading, caching and timeouts are the table layer's
(:mod:`quixsinks.core.tables.catalog`).
"""

from __future__ import annotations

from typing import Any

from quixsinks.core.errors import DestinationError
from quixsinks.core.tables import catalog as table_catalogs
from quixsinks.core.tables.catalog import (
    PYARROW_FILE_IO,
    TIMEOUT_PROPERTY,
    TableCatalog,
    catalog_error,
    import_pyiceberg,
    local_dir,
    s3_properties,
)

from .options import IcebergOptions

__all__ = [
    "catalog_of",
    "catalog_properties",
    "forget_catalog",
    "import_pyiceberg",
    "load_catalog",
    "translate",
]


def catalog_properties(opts: IcebergOptions) -> dict[str, str]:
    """The ``load_catalog`` properties of these options."""
    props: dict[str, str] = {"type": opts.catalog_type}
    if opts.warehouse is not None:
        local = local_dir(opts.warehouse)
        props["warehouse"] = f"file://{local}" if local is not None else opts.warehouse
    if opts.catalog_uri is not None:
        props["uri"] = opts.catalog_uri
    elif opts.catalog_type == "sql" and opts.warehouse is not None:
        local = local_dir(opts.warehouse)
        if local is not None:
            props["uri"] = f"sqlite:///{local}/catalog.db"
    glue = opts.catalog_type == "glue"
    props.update(
        s3_properties(opts, region=opts.aws_region, endpoint=opts.aws_endpoint_url, glue=glue)
    )
    props["py-io-impl"] = PYARROW_FILE_IO
    props[TIMEOUT_PROPERTY] = f"{opts.catalog_timeout_seconds:g}"
    props.update(opts.catalog_properties)
    return props


def catalog_of(opts: IcebergOptions) -> TableCatalog:
    """The table layer's view of these options."""
    return TableCatalog(
        sink="iceberg",
        name=opts.catalog_name,
        properties=tuple(catalog_properties(opts).items()),
        timeout_seconds=opts.catalog_timeout_seconds,
        commit_max_attempts=opts.commit_max_attempts,
        keep_snapshots=opts.keep_snapshots,
        takeover_query_id=opts.takeover_query_id,
        ledger_keep_batches=opts.ledger_keep_batches,
        secrets=tuple(opts.secret_values()),
    )


def load_catalog(opts: IcebergOptions) -> Any:
    """The process's catalog for these options (opened on first use)."""
    return table_catalogs.load_catalog(catalog_of(opts))


def forget_catalog(opts: IcebergOptions) -> None:
    """Drop the cached catalog (after a connection-level failure)."""
    table_catalogs.forget_catalog(catalog_of(opts))


def translate(exc: BaseException, opts: IcebergOptions, what: str) -> DestinationError:
    """The quixsinks error of a failed catalog call (``what``: e.g. "loading the table")."""
    where = f"iceberg table {opts.table_name} ({opts.catalog_type} catalog)"
    return catalog_error(exc, catalog_of(opts), f"iceberg: {what} failed for {where}", where)
