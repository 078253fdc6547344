"""The ``tsdatalake`` sink's catalog (``catalog_url``): the Hive files of each micro-batch,
registered in an Iceberg table of a REST catalog, exactly once, through the table layer
(:mod:`quixsinks.core.tables`).

The table's partition spec is the hive columns' equivalent (:func:`.wire.spec_fields`).
Identity values are not in the files (the Hive layout drops them): Iceberg readers take
them from the partition values of the manifest, which the spec allows and pyiceberg and
Iceberg's Spark runtime do.

The files stay where the Hive layout puts them; they are registered by absolute path, with
column statistics from their Parquet footers (captured by the tasks) and a name mapping
(the files carry no Iceberg field ids). The table's own location, where the catalog and
pyiceberg keep metadata and manifests, is ``<path>/_quixsinks/<table>/iceberg``: Hive
readers skip it.

Each commit is :func:`quixsinks.core.tables.commit.append_once`: one snapshot per
micro-batch, its summary holding the batch's fenced ledger entry, so a replayed batch is
never registered twice. :func:`translate` is the error boundary of every catalog call.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from quixsinks.core.errors import (
    DestinationError,
    DestinationNotFoundError,
    OptionError,
    QuixSinksError,
)
from quixsinks.core.secrets import mask_value
from quixsinks.core.sink import CommitContext
from quixsinks.core.tables.catalog import (
    PYARROW_FILE_IO,
    TIMEOUT_PROPERTY,
    TableCatalog,
    catalog_error,
    forget_catalog,
    import_pyiceberg,
    load_catalog,
    s3_properties,
)
from quixsinks.core.tables.commit import TableRaced, append_once, retry_races
from quixsinks.core.tables.expiry import expire_old_snapshots
from quixsinks.core.tables.ledger import SnapshotLedgerStore
from quixsinks.core.tables.partitioning import add_partition_fields

from .options import TIME_COLUMNS, TSDataLakeOptions
from .wire import (
    describe_fields,
    hive_equivalent,
    partition_fields,
    partition_values,
    spec_fields,
)

__all__ = ["CatalogTable", "RegisteredFile", "catalog_of", "read_published", "translate"]

logger = logging.getLogger("quixsinks.sinks.tsdatalake")

NAME_MAPPING = "schema.name-mapping.default"
#: the catalog's name in pyiceberg
CATALOG_NAME = "quixsinks"


def catalog_of(options: TSDataLakeOptions) -> TableCatalog:
    """The table layer's view of the ``catalog_url`` options."""
    props: dict[str, str] = {"type": "rest", "uri": str(options.catalog_url)}
    if str(options.path).startswith(("s3://", "s3a://")):  # the files' store, for pyiceberg
        s3 = s3_properties(options, region=options.region_name, endpoint=options.endpoint_url)
        props.update(s3)
    props["py-io-impl"] = PYARROW_FILE_IO
    props[TIMEOUT_PROPERTY] = f"{options.catalog_timeout_seconds:g}"
    if options.catalog_auth_token:
        props["token"] = options.catalog_auth_token
    return TableCatalog(
        sink="tsdatalake",
        name=CATALOG_NAME,
        properties=tuple(props.items()),
        timeout_seconds=options.catalog_timeout_seconds,
        commit_max_attempts=options.catalog_commit_max_attempts,
        keep_snapshots=options.catalog_keep_snapshots,
        takeover_query_id=options.takeover_query_id,
        ledger_keep_batches=options.ledger_keep_batches,
        secrets=tuple(options.secret_values()),
    )


def translate(exc: BaseException, options: TSDataLakeOptions, what: str) -> DestinationError:
    """The quixsinks error of a failed catalog call (``what``: e.g. "connecting")."""
    url = mask_value(str(options.catalog_url))
    return catalog_error(
        exc, catalog_of(options), f"tsdatalake: {what} in the catalog at {url} failed", url
    )


@dataclass(frozen=True)
class RegisteredFile:
    """A published data file: its key under the root, size, and its Parquet footer (None
    when the tasks of another attempt wrote it: it is read back then)."""

    key: str
    nbytes: int
    footer: Any = None


class CatalogTable:
    """The Iceberg table of one tsdatalake table (driver side)."""

    def __init__(self, options: TSDataLakeOptions, root_url: str) -> None:
        self.options = options
        self.root_url = root_url.rstrip("/")
        self.identifier = f"{options.namespace}.{options.table_name}"
        self.location = f"{self._absolute(root_url)}/_quixsinks/{options.table_name}/iceberg"
        self.catalog = catalog_of(options)

    # ------------------------------------------------------------------ helpers

    @staticmethod
    def _absolute(url: str) -> str:
        if "://" in url:
            return url.rstrip("/")
        return "file://" + url.rstrip("/")

    def file_url(self, key: str) -> str:
        return f"{self._absolute(self.root_url)}/{key}"

    def _error(self, exc: BaseException, what: str) -> DestinationError:
        return translate(exc, self.options, what)

    @property
    def _url(self) -> str:
        """``catalog_url`` as messages show it (its password masked)."""
        return mask_value(str(self.options.catalog_url))

    def _catalog(self) -> Any:
        import_pyiceberg()
        try:
            return load_catalog(self.catalog)
        except QuixSinksError:
            raise
        except Exception as exc:
            raise self._error(exc, "connecting") from None

    def load(self) -> Any | None:
        """The table, or None when the catalog does not have it."""
        from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError

        try:
            return self._catalog().load_table(self.identifier)
        except (NoSuchTableError, NoSuchNamespaceError):
            return None
        except QuixSinksError:
            raise
        except Exception as exc:
            forget_catalog(self.catalog)
            raise self._error(exc, f"loading table {self.identifier}") from None

    def _load_existing(self) -> Any:
        table = self.load()
        if table is None:
            raise DestinationNotFoundError(
                f"tsdatalake: table {self.identifier} is gone from the catalog at {self._url}",
                location=self._url,
            )
        return table

    # ------------------------------------------------------------------ planning

    def check(self, row_schema: pa.Schema | None) -> None:
        """Before any data moves: the catalog answers, the table exists (or may be
        created), and its partitioning is the hive columns'."""
        table = self.load()
        if table is None:
            if not self.options.auto_discover:
                raise DestinationNotFoundError(
                    f"tsdatalake: table {self.identifier} does not exist in the catalog at "
                    f"{self._url} and auto_discover=false; create it, or set "
                    "auto_discover=true",
                    location=self._url,
                )
            if row_schema is not None:
                self.ensure(row_schema)
            return  # JSON values: created with the first micro-batch's columns
        self._check_spec(table)
        if row_schema is not None:
            self._evolve(table, row_schema)

    def _check_spec(self, table: Any) -> None:
        opts = self.options
        spec, schema = table.spec(), table.schema()
        theirs = hive_equivalent(spec, schema)
        time_sources = {
            schema.find_column_name(f.source_id)
            for f in spec.fields
            if str(f.transform) in TIME_COLUMNS
        }
        if theirs != list(opts.hive_columns) or time_sources - {opts.timestamp_column}:
            layout = describe_fields(partition_fields(spec, schema)) or "unpartitioned"
            raise OptionError(
                f"tsdatalake: table {self.identifier} in the catalog is partitioned by "
                f"{layout}, which is not the hive columns "
                f"{'/'.join(opts.hive_columns) or '(unpartitioned)'} on timestamp_column "
                f"{opts.timestamp_column!r}; write with its layout or to another table",
                option="hive_columns",
                value=",".join(opts.hive_columns),
            )

    # ------------------------------------------------------------------ schema

    def table_schema(self, row_schema: pa.Schema) -> pa.Schema:
        """The Iceberg table's columns for rows of this schema (all nullable)."""
        ts = self.options.timestamp_column
        ts_type = row_schema.field(ts).type if ts in row_schema.names else None
        fields = [pa.field(f.name, f.type, nullable=True) for f in row_schema]
        names = set(row_schema.names)
        for pf in spec_fields(self.options, ts_type):
            if pf.transform == "identity" and pf.source not in names:
                fields.append(pa.field(pf.source, pa.string()))  # a derived time column
        return pa.schema(fields)

    def ensure(self, row_schema: pa.Schema, table: Any = None) -> Any:
        """Load (unless ``table`` is the table, loaded) or create the table, and evolve its
        schema to hold these rows."""
        from pyiceberg.exceptions import NamespaceAlreadyExistsError, TableAlreadyExistsError

        table = table if table is not None else self.load()
        if table is None:
            if not self.options.auto_discover:
                self._load_existing()
            catalog = self._catalog()
            with contextlib.suppress(NamespaceAlreadyExistsError):
                if not catalog.namespace_exists(self.options.namespace):
                    catalog.create_namespace(self.options.namespace)
            schema = self.table_schema(row_schema)
            ts = self.options.timestamp_column
            ts_type = schema.field(ts).type if ts in schema.names else None
            fields = spec_fields(self.options, ts_type)
            try:
                tx = catalog.create_table_transaction(
                    self.identifier,
                    schema=schema,
                    location=self.location,
                    properties={"commit.manifest-merge.enabled": "true"},
                )
                add_partition_fields(tx, fields)
                mapping = tx.table_metadata.schema().name_mapping  # the files have no field ids
                tx.set_properties(**{NAME_MAPPING: mapping.model_dump_json()})
                table = tx.commit_transaction()
                logger.info(
                    "tsdatalake: created %s in the catalog, partitioned by %s",
                    self.identifier,
                    describe_fields(fields) or "nothing",
                )
                return table
            except TableAlreadyExistsError:
                table = self._load_existing()
            except QuixSinksError:
                raise
            except Exception as exc:  # a lost answer may hide a table that was created
                forget_catalog(self.catalog)
                table = self.load()
                if table is None:
                    raise self._error(exc, f"creating table {self.identifier}") from None
        self._check_spec(table)
        return self._evolve(table, row_schema)

    def _evolve(self, table: Any, row_schema: pa.Schema) -> Any:
        """Add the rows' new columns (and safe widenings) to the table."""
        from pyiceberg.exceptions import CommitFailedException

        from quixsinks.core.tables.pyiceberg_compat import evolved_schema

        current = [table]

        def attempt() -> Any:
            table = current[0]
            update = table.update_schema()
            try:
                update.union_by_name(self.table_schema(row_schema))
                evolved = evolved_schema(update)
            except Exception as exc:
                raise OptionError(
                    f"tsdatalake: the rows do not fit table {self.identifier} in the catalog "
                    f"({exc}); only new columns and safe widening are allowed",
                    option="table_name",
                    value=self.options.table_name,
                ) from None
            if evolved.as_struct() == table.schema().as_struct():
                return table
            try:
                update.commit()  # pyiceberg updates the name mapping with the schema
                return table
            except CommitFailedException:
                current[0] = self._load_existing()
                raise TableRaced(f"tsdatalake: the schema of {self.identifier} changed") from None

        try:
            return retry_races(attempt, attempts=5, what="tsdatalake: schema", backoff=0.0)
        except TableRaced:
            raise OptionError(
                f"tsdatalake: the schema of {self.identifier} kept changing under this writer",
                option="table_name",
                value=self.options.table_name,
            ) from None

    # ------------------------------------------------------------------ commit

    def register(
        self,
        context: CommitContext,
        files: Sequence[RegisteredFile],
        row_schema: pa.Schema | None,
        read: Callable[[str], RegisteredFile],
    ) -> bool:
        """Append the batch's files in one snapshot unless it is registered already.

        Args:
            files: the published files; those without a footer are read with ``read``.
            row_schema: the rows' columns (hive identity columns included), when known.

        Returns True when this call registered the batch.
        """
        if not files:
            return False
        table = self.load()
        if table is not None and self.catalog.ledger(SnapshotLedgerStore(table)).committed(
            context.sink_id, context.batch_id, context.query_id
        ):
            return False  # a replay after a landed registration: no footer to read
        files = [f if f.footer is not None else read(f.key) for f in files]
        in_files = [f.footer.schema.to_arrow_schema() for f in files]
        rows = _union([*([row_schema] if row_schema else []), *in_files])
        table = self.ensure(rows, table)  # the table loaded for the ledger check above
        data_files = [self._data_file(table, f) for f in files]
        outcome = append_once(
            context,
            data_files,
            catalog=self.catalog,
            load_table=self._load_existing,
            table_name=self.identifier,
        )
        expire_old_snapshots(
            outcome.table,
            self._load_existing,
            self.catalog,
            None,
            table_name=self.identifier,
            log=logger,
        )
        return not outcome.already_committed

    def _data_file(self, table: Any, file: RegisteredFile) -> Any:
        from pyiceberg.io.pyarrow import (
            compute_statistics_plan,
            data_file_statistics_from_parquet_metadata,
            parquet_path_to_id_mapping,
        )
        from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
        from pyiceberg.typedef import Record

        meta = table.metadata
        schema = meta.schema()
        spec = meta.spec()
        statistics = data_file_statistics_from_parquet_metadata(
            parquet_metadata=file.footer,
            stats_columns=compute_statistics_plan(schema, meta.properties),
            parquet_column_mapping=parquet_path_to_id_mapping(schema),
        )
        return DataFile.from_args(
            content=DataFileContent.DATA,
            file_path=self.file_url(file.key),
            file_format=FileFormat.PARQUET,
            partition=Record(*partition_values(file.key, spec, schema)),
            file_size_in_bytes=file.nbytes,
            sort_order_id=None,
            spec_id=meta.default_spec_id,
            equality_ids=None,
            key_metadata=None,
            **statistics.to_serialized_dict(),
        )


def _union(schemas: Sequence[pa.Schema]) -> pa.Schema:
    fields: dict[str, pa.Field] = {}
    for schema in schemas:
        for f in schema:
            fields.setdefault(f.name, f)
    return pa.schema(list(fields.values()))


def read_published(destination: Any, key: str) -> RegisteredFile:
    """A published file with its size and footer, read back whole (the replay of a batch
    whose files another attempt wrote)."""
    data = destination.read_bytes(key)
    return RegisteredFile(key, len(data), pq.read_metadata(pa.BufferReader(data)))
