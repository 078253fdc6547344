"""Catalog registration (``catalog_url``): the Hive files of each micro-batch, in an Iceberg
table of a REST catalog, exactly once.

The table's partition spec is equivalent to the hive columns: the time columns become one
time transform of the timestamp column (``hour(ts)`` for year/month/day/hour, ``day(ts)``
for year/month/day, and so on) when that column is a timestamp; with an integer epoch
(Iceberg's time transforms take timestamps only) or a time chain with a gap (day without
month), each time column is an identity partition of a string column instead. Any other
hive column is an identity partition of its column. Identity values are not in the files
(the Hive layout drops them): Iceberg readers take them from the partition values of the
manifest, which the spec allows and pyiceberg and Iceberg's Spark runtime do.

The files stay where the Hive layout puts them; they are registered by absolute path, with
column statistics from their Parquet footers (captured by the tasks) and a name mapping
(the files carry no Iceberg field ids). The table's own location, where the catalog and
pyiceberg keep metadata and manifests, is ``<path>/_quixsinks/<table>/iceberg``: Hive
readers skip it.

Each commit is :func:`quixsinks.sinks.iceberg.commit.append_once`: one snapshot per
micro-batch, its summary holding the batch's fenced ledger entry, so a replayed batch is
never registered twice.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.parquet as pq

from quixsinks.core.errors import (
    DestinationError,
    DestinationNotFoundError,
    OptionError,
    QuixSinksError,
    timed_out,
)
from quixsinks.core.secrets import mask_value, scrub
from quixsinks.core.sink import CommitContext
from quixsinks.sinks.iceberg.catalog import (
    forget_catalog,
    import_pyiceberg,
    is_timeout,
    load_catalog,
)
from quixsinks.sinks.iceberg.commit import append_once
from quixsinks.sinks.iceberg.ledger import SnapshotLedgerStore
from quixsinks.sinks.iceberg.maintenance import expire_old_snapshots
from quixsinks.sinks.iceberg.options import IcebergOptions
from quixsinks.sinks.iceberg.partitioning import PartitionField, to_transform

from .layout import NULL_PARTITION
from .options import TIME_COLUMNS, TSDataLakeOptions

__all__ = ["CatalogTable", "RegisteredFile", "hive_equivalent", "read_published", "spec_fields"]

logger = logging.getLogger("quixsinks.sinks.tsdatalake")

_EPOCH_DATE = dt.date(1970, 1, 1)
NAME_MAPPING = "schema.name-mapping.default"


@dataclass(frozen=True)
class RegisteredFile:
    """A published data file: its key under the root, size, and its Parquet footer (None
    when the tasks of another attempt wrote it: it is read back then)."""

    key: str
    nbytes: int
    footer: Any = None


def _time_chain(opts: TSDataLakeOptions) -> str | None:
    """The finest time column when the hive columns hold a prefix of year/month/day/hour,
    side by side and in that order (what one time transform stands for)."""
    hive = list(opts.hive_columns)
    time = [c for c in hive if c in TIME_COLUMNS]
    if not time or time != list(TIME_COLUMNS[: len(time)]):
        return None
    first = hive.index(time[0])
    if hive[first : first + len(time)] != time:
        return None
    return time[-1]


def spec_fields(
    opts: TSDataLakeOptions, timestamp_type: pa.DataType | None
) -> list[PartitionField]:
    """The Iceberg partition fields equivalent to the hive columns, in their order."""
    finest = _time_chain(opts)
    transform = finest is not None and (
        timestamp_type is not None and pa.types.is_timestamp(timestamp_type)
    )
    fields: list[PartitionField] = []
    for column in opts.hive_columns:
        if column in TIME_COLUMNS and transform:
            if column == "year":  # the transform sits where the time columns start
                fields.append(PartitionField(opts.timestamp_column, str(finest)))
            continue
        fields.append(PartitionField(column, "identity"))
    return fields


def _fields(spec: Any, schema: Any) -> list[PartitionField]:
    """A table's partition spec as partition fields named by their source columns."""
    return [
        PartitionField(str(schema.find_column_name(f.source_id)), str(f.transform))
        for f in spec.fields
    ]


def hive_equivalent(spec: Any, schema: Any) -> list[str]:
    """The hive columns a table's partition spec stands for (``?`` for what has none)."""
    return expand(_fields(spec, schema))


def expand(fields: Iterable[PartitionField]) -> list[str]:
    """The hive columns of partition fields: a time transform stands for its chain."""
    out: list[str] = []
    for field in fields:
        if field.transform == "identity":
            out.append(field.source)
        elif field.transform in TIME_COLUMNS:
            out.extend(TIME_COLUMNS[: TIME_COLUMNS.index(field.transform) + 1])
        else:
            out.append(f"{field.transform}({field.source})?")
    return out


def _describe(fields: Sequence[PartitionField]) -> str:
    return ", ".join(
        f.source if f.transform == "identity" else f"{f.transform}({f.source})" for f in fields
    )


class CatalogTable:
    """The Iceberg table of one tsdatalake table (driver side)."""

    def __init__(self, options: TSDataLakeOptions, root_url: str) -> None:
        self.options = options
        self.root_url = root_url.rstrip("/")
        self.identifier = f"{options.namespace}.{options.table_name}"
        self.location = f"{self._absolute(root_url)}/_quixsinks/{options.table_name}/iceberg"
        props: dict[str, str] = {
            "table_name": self.identifier,
            "catalog_type": "rest",
            "catalog_uri": str(options.catalog_url),
            "create_namespace": "true",
            "commit_max_attempts": str(options.catalog_commit_max_attempts),
            "catalog_timeout_seconds": repr(options.catalog_timeout_seconds),
        }
        if options.catalog_auth_token:
            props["catalog.token"] = options.catalog_auth_token
        if options.catalog_keep_snapshots is not None:
            props["keep_snapshots"] = str(options.catalog_keep_snapshots)
        if options.takeover_query_id:
            props["takeover_query_id"] = options.takeover_query_id
        props.update(self._io_properties())
        self.iceberg = IcebergOptions.from_options(props)

    # ------------------------------------------------------------------ helpers

    @staticmethod
    def _absolute(url: str) -> str:
        if "://" in url:
            return url.rstrip("/")
        return "file://" + url.rstrip("/")

    def _io_properties(self) -> dict[str, str]:
        """The object store's credentials under pyiceberg's FileIO names (S3 only)."""
        opts = self.options
        out: dict[str, str] = {}
        if not str(opts.path).startswith(("s3://", "s3a://")):
            return out
        pairs = {
            "aws_access_key_id": opts.aws_access_key_id,
            "aws_secret_access_key": opts.aws_secret_access_key,
            "aws_session_token": opts.aws_session_token,
            "aws_region": opts.region_name,
            "aws_endpoint_url": opts.endpoint_url,
        }
        return {k: v for k, v in pairs.items() if v}

    def file_url(self, key: str) -> str:
        return f"{self._absolute(self.root_url)}/{key}"

    def _error(self, exc: BaseException, what: str) -> DestinationError:
        text = self._scrub(f"{type(exc).__name__}: {exc}")
        if is_timeout(exc):
            seconds = self.options.catalog_timeout_seconds
            text = f"{timed_out(seconds, 'catalog_timeout_seconds')}: {text}"
        return DestinationError(
            f"tsdatalake: {what} in the catalog at {self._url} failed: {text}",
            location=self._url,
        )

    def _scrub(self, text: str) -> str:
        return scrub(text, [*self.options.secret_values(), *self.iceberg.secret_values()])

    @property
    def _url(self) -> str:
        """``catalog_url`` as messages show it (its password masked)."""
        return mask_value(str(self.options.catalog_url))

    def _catalog(self) -> Any:
        import_pyiceberg()
        try:
            return load_catalog(self.iceberg)
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
            forget_catalog(self.iceberg)
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
            layout = _describe(_fields(spec, schema)) or "unpartitioned"
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
                with tx.update_spec() as spec:
                    for pf in fields:
                        spec.add_field(pf.source, to_transform(pf), pf.name)
                mapping = tx.table_metadata.schema().name_mapping  # the files have no field ids
                tx.set_properties(**{NAME_MAPPING: mapping.model_dump_json()})
                table = tx.commit_transaction()
                logger.info(
                    "tsdatalake: created %s in the catalog, partitioned by %s",
                    self.identifier,
                    _describe(fields) or "nothing",
                )
                return table
            except TableAlreadyExistsError:
                table = self._load_existing()
            except QuixSinksError:
                raise
            except Exception as exc:  # a lost answer may hide a table that was created
                forget_catalog(self.iceberg)
                table = self.load()
                if table is None:
                    raise self._error(exc, f"creating table {self.identifier}") from None
        self._check_spec(table)
        return self._evolve(table, row_schema)

    def _evolve(self, table: Any, row_schema: pa.Schema) -> Any:
        """Add the rows' new columns (and safe widenings) to the table."""
        from pyiceberg.exceptions import CommitFailedException

        for _ in range(5):
            update = table.update_schema()
            try:
                update.union_by_name(self.table_schema(row_schema))
                evolved = update._apply()
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
                table = self._load_existing()
        raise OptionError(
            f"tsdatalake: the schema of {self.identifier} kept changing under this writer",
            option="table_name",
            value=self.options.table_name,
        )

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
        if table is not None and self.iceberg.ledger(SnapshotLedgerStore(table)).committed(
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
            load_table=self._load_existing,
            ledger=self.iceberg.ledger,
            table_name=self.identifier,
            max_attempts=self.iceberg.commit_max_attempts,
            scrub=self._scrub,
            forget_client=lambda: forget_catalog(self.iceberg),
            sink="tsdatalake",
            timeout_seconds=self.options.catalog_timeout_seconds,
        )
        expire_old_snapshots(
            outcome.table,
            self._load_existing,
            self.iceberg.keep_snapshots,
            None,
            table_name=self.identifier,
            scrub=self._scrub,
            log=logger,
            sink="tsdatalake",
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
            partition=Record(*self.partition_values(file.key, spec, schema)),
            file_size_in_bytes=file.nbytes,
            sort_order_id=None,
            spec_id=meta.default_spec_id,
            equality_ids=None,
            key_metadata=None,
            **statistics.to_serialized_dict(),
        )

    def partition_values(self, key: str, spec: Any, schema: Any) -> list[Any]:
        """A file's partition tuple, from its Hive path (``<table>/<col>=<value>/.../f``)."""
        segments = key.split("/")[1:-1]
        path: dict[str, str | None] = {}
        for segment in segments:
            name, _, text = segment.partition("=")
            value = unquote(text)
            path[unquote(name)] = None if value == NULL_PARTITION else value
        values: list[Any] = []
        for field in spec.fields:
            transform = str(field.transform)
            column = schema.find_field(field.source_id)
            if transform == "identity":
                values.append(_typed(path.get(column.name), column.field_type))
                continue
            values.append(_time_value(transform, path))
        return values


def _union(schemas: Sequence[pa.Schema]) -> pa.Schema:
    fields: dict[str, pa.Field] = {}
    for schema in schemas:
        for f in schema:
            fields.setdefault(f.name, f)
    return pa.schema(list(fields.values()))


def _typed(text: str | None, field_type: Any) -> Any:
    """A Hive path value as the Iceberg type of its column."""
    if text is None:
        return None
    kind = str(field_type)
    if kind in ("int", "long"):
        return int(text)
    if kind == "boolean":
        return text.lower() == "true"
    if kind == "date":
        return (dt.date.fromisoformat(text) - _EPOCH_DATE).days
    return text


def _time_value(transform: str, path: dict[str, str | None]) -> int | None:
    """The value of a time transform from the year/month/day/hour of a path."""
    if any(path.get(c) is None for c in TIME_COLUMNS[: TIME_COLUMNS.index(transform) + 1]):
        return None
    year = int(str(path["year"]))
    if transform == "year":
        return year - 1970
    month = int(str(path["month"]))
    if transform == "month":
        return (year - 1970) * 12 + month - 1
    days = (dt.date(year, month, int(str(path["day"]))) - _EPOCH_DATE).days
    if transform == "day":
        return days
    return days * 24 + int(str(path["hour"]))


def read_published(destination: Any, key: str) -> RegisteredFile:
    """A published file with its size and footer, read back whole (the replay of a batch
    whose files another attempt wrote)."""
    data = destination.read_bytes(key)
    return RegisteredFile(key, len(data), pq.read_metadata(pa.BufferReader(data)))
