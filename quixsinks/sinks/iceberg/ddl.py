"""The ``iceberg`` sink's table definition: load the table, or create it (namespace,
schema, partition spec), or evolve its schema (``schema_mode``); and the plan executors
write data files with (the table's metadata without its history).

Concurrent writers race: a lost race (a table created or a schema changed meanwhile) loads
the table again and tries again through :func:`~quixsinks.core.tables.commit.retry_races`.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from quixsinks.core.errors import (
    CommitError,
    DestinationError,
    DestinationNotFoundError,
    OptionError,
    QuixSinksError,
    RecordError,
)
from quixsinks.core.tables.commit import TableRaced, retry_races
from quixsinks.core.tables.partitioning import PartitionField, add_partition_fields

from .client import catalog_properties, forget_catalog, load_catalog, translate
from .options import IcebergOptions
from .wire import check_types, conform_schema, keeping_required, nullable

__all__ = ["NEW_TABLE_PROPERTIES", "SCHEMA_MAX_ATTEMPTS", "TableDDL", "TablePlan"]

logger = logging.getLogger("quixsinks.sinks.iceberg")

#: table properties of the tables this sink creates
NEW_TABLE_PROPERTIES = {
    "commit.manifest-merge.enabled": "true",
    "write.parquet.compression-codec": "zstd",
}
#: schema commits a task tries to add its JSON's columns (concurrent tasks race)
SCHEMA_MAX_ATTEMPTS = 50


@dataclass(frozen=True)
class TablePlan:
    """What executors need to write data files: the table's metadata without its history
    (schema, partition spec, properties, location) and its FileIO properties."""

    metadata_json: str
    io_properties: tuple[tuple[str, str], ...] = field(repr=False)
    location: str


class TableDDL:
    """The table of ``options`` in its catalog (``partition_fields``: a new table's spec)."""

    def __init__(
        self, options: IcebergOptions, partition_fields: tuple[PartitionField, ...] = ()
    ) -> None:
        self.options = options
        self.partition_fields = partition_fields

    def _where(self) -> str:
        return f"iceberg table {self.options.table_name} ({self.options.catalog_type} catalog)"

    def _catalog_error(self, exc: BaseException, what: str) -> DestinationError:
        return translate(exc, self.options, what)

    def catalog(self) -> Any:
        try:
            return load_catalog(self.options)
        except QuixSinksError:
            raise
        except Exception as exc:
            raise self._catalog_error(exc, "opening the catalog") from None

    def load(self) -> Any:
        """The table, loaded afresh (the cached catalog dropped after a failure)."""
        try:
            return self.catalog().load_table(self.options.table_name)
        except QuixSinksError:
            raise
        except Exception as exc:
            forget_catalog(self.options)
            raise self._catalog_error(exc, "loading the table") from None

    def ensure(self, schema: pa.Schema, *, json_values: bool = False) -> TablePlan:
        """Load, create or evolve the table (driver I/O, once per process and schema).
        ``json_values``: ``schema`` is Quix's layout without the value columns (each
        batch's JSON brings them), so it may lack a required column."""
        from pyiceberg.exceptions import (
            NoSuchNamespaceError,
            NoSuchTableError,
            TableAlreadyExistsError,
        )

        catalog = self.catalog()
        opts = self.options
        last: list[Any] = []

        def attempt() -> Any:
            try:
                table = catalog.load_table(opts.table_name)
            except (NoSuchTableError, NoSuchNamespaceError):
                try:
                    table = self.create(catalog, schema)
                except TableAlreadyExistsError:
                    raise TableRaced(f"iceberg: {opts.table_name} was created meanwhile") from None
                except QuixSinksError:
                    raise
                except Exception as exc:
                    raise self._catalog_error(exc, "creating the table") from None
            except QuixSinksError:
                raise
            except Exception as exc:
                raise self._catalog_error(exc, "loading the table") from None
            last[:] = [table]
            # Quix's layout fits the table as the JSON's columns do (a zone-less _timestamp)
            fitted = conform_schema(schema, table.schema()) if json_values else schema
            if not self.reconcile(table, fitted, lacking_required=json_values):
                raise TableRaced(f"iceberg: the schema of {opts.table_name} changed meanwhile")
            return table

        try:
            table = retry_races(attempt, attempts=5, what="iceberg: planning", backoff=0.0)
        except TableRaced:
            if not last:
                raise
            table = last[0]  # another writer keeps evolving it: plan with what was read
        return self.plan_of(table)

    def plan_of(self, table: Any) -> TablePlan:
        meta = table.metadata.model_copy(
            update={
                "snapshots": [],
                "snapshot_log": [],
                "metadata_log": [],
                "refs": {},
                "current_snapshot_id": None,
                "statistics": [],
                "partition_statistics": [],
            }
        )
        io_props = {**catalog_properties(self.options), **dict(table.io.properties)}
        # properties travel to the executors as text; objects (the Glue catalog's botocore
        # session) stay on the driver
        io_props = {k: v for k, v in io_props.items() if isinstance(v, str)}
        return TablePlan(meta.model_dump_json(), tuple(sorted(io_props.items())), table.location())

    def create(self, catalog: Any, schema: pa.Schema) -> Any:
        from pyiceberg.exceptions import NamespaceAlreadyExistsError, NoSuchNamespaceError

        opts = self.options
        namespace = opts.namespace
        try:
            exists = catalog.namespace_exists(namespace)
        except Exception as exc:
            raise self._catalog_error(exc, "looking up the namespace") from None
        if not exists:
            if not opts.create_namespace:
                raise DestinationNotFoundError(
                    f"iceberg: namespace {'.'.join(namespace)!r} does not exist; create it, or "
                    "set create_namespace=true",
                    location=self._where(),
                )
            with contextlib.suppress(NamespaceAlreadyExistsError):
                catalog.create_namespace(namespace)
        try:
            tx = catalog.create_table_transaction(
                opts.table_name, schema=nullable(schema), properties=NEW_TABLE_PROPERTIES
            )
            add_partition_fields(tx, self.partition_fields)
            table = tx.commit_transaction()
        except NoSuchNamespaceError as exc:
            raise self._catalog_error(exc, "creating the table") from None
        except (ValueError, TypeError) as exc:
            raise OptionError(
                f"iceberg: cannot create {opts.table_name} from the DataFrame's schema: {exc}",
                option="table_name",
                value=opts.table_name,
            ) from None
        logger.info(
            "iceberg: created table %s partitioned by %s",
            opts.table_name,
            ", ".join(map(str, self.partition_fields)) or "nothing",
        )
        return table

    def reconcile(
        self,
        table: Any,
        schema: pa.Schema,
        source: str = "the DataFrame",
        *,
        lacking_required: bool = False,
    ) -> bool:
        """Check the DataFrame (or a batch's JSON values: ``source``) fits the table; evolve
        it (schema_mode=evolve). False when a concurrent schema change won (reload and try
        again). A required column stays required (a row without a value for it is refused
        when written); ``lacking_required``: ``schema`` may lack such a column (a batch's
        JSON: its rows are refused), else that is an OptionError."""
        from pyiceberg.exceptions import CommitFailedException

        from quixsinks.core.tables.pyiceberg_compat import evolved_schema

        opts = self.options
        current = table.schema()
        names = set(schema.names)
        missing = [f.name for f in current.fields if f.required and f.name not in names]
        if missing and not lacking_required:
            raise OptionError(
                f"iceberg: table {opts.table_name} has required columns {source} lacks: "
                f"{', '.join(missing)}",
                option="table_name",
                value=opts.table_name,
            )
        update = table.update_schema()
        try:
            update.union_by_name(keeping_required(nullable(schema), current))
            evolved = evolved_schema(update)
        except Exception as exc:
            raise OptionError(
                f"iceberg: the schema of {source} is incompatible with table "
                f"{opts.table_name} ({exc}); only new columns and safe widening (int to "
                "bigint, float to double, wider decimal) are allowed",
                option="schema_mode",
                value=opts.schema_mode,
            ) from None
        if evolved.as_struct() == current.as_struct():
            return True
        changes = sorted(set(map(str, evolved.fields)) - set(map(str, current.fields)))
        if opts.schema_mode == "freeze":
            raise OptionError(
                f"iceberg: {source} does not fit table {opts.table_name} and "
                f"schema_mode=freeze: it would need {'; '.join(changes)}",
                option="schema_mode",
                value="freeze",
            )
        try:
            update.commit()
        except CommitFailedException:
            return False
        except Exception as exc:
            raise self._catalog_error(exc, "evolving the schema") from None
        logger.info("iceberg: evolved the schema of %s: %s", opts.table_name, "; ".join(changes))
        return True

    def evolve_for(self, parsed: pa.Schema, source: str) -> tuple[pa.Schema, Any]:
        """Evolve the table to hold ``parsed`` (an executor, between tasks of other
        partitions doing the same: a lost race reloads and checks again; each round
        one of the racing tasks wins, so the attempts grow with the number of tasks)."""

        def attempt() -> None:
            table = self.load()
            columns = conform_schema(parsed, table.schema())
            try:
                check_types(columns)
                raced = not self.reconcile(table, columns, source, lacking_required=True)
            except OptionError as exc:
                raise RecordError(str(exc)) from None
            if raced:
                raise TableRaced(f"iceberg: the schema of {self.options.table_name} changed")

        try:
            retry_races(attempt, attempts=SCHEMA_MAX_ATTEMPTS, what="iceberg: schema", backoff=0.01)
        except TableRaced:
            raise CommitError(
                f"iceberg: the schema of {self.options.table_name} kept changing while the "
                f"columns of {source} were being added ({SCHEMA_MAX_ATTEMPTS} attempts)"
            ) from None
        table = self.load()
        return conform_schema(parsed, table.schema()), table.metadata
