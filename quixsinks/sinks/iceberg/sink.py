"""The Iceberg sink: executors write Parquet data files, the driver commits one snapshot.

Planning (driver): the table is loaded, or created from the DataFrame's schema (with
``partition_by`` or Quix's default layout), or its schema evolved (``schema_mode``). The
table's metadata without its history travels to the executors (once per process and
DataFrame schema: Spark plans a micro-batch several times).

Executor: each SinkBatch is written by pyiceberg's writer as Parquet data files with
field ids, split by partition, under the table's data location, with names unique to
the task attempt. The task returns the files' ``DataFile`` entries (small, picklable).

Driver: ``commit`` loads the table, walks the main branch's ancestry for this batch's
ledger entry (:mod:`.ledger`: the snapshot summary; fenced by query id), and commits one
append (or, in overwrite / complete mode, delete-all plus append) whose summary records
the batch. pyiceberg's own retry loop is bypassed (it would re-commit without checking
our marker): on a conflict or an unknown outcome the table is reloaded, the ledger read
again and the commit retried. ``abort`` re-reads the ledger before deleting files.
"""

from __future__ import annotations

import contextlib
import logging
import random
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, ClassVar

import pyarrow as pa

from quixsinks.core.errors import (
    CommitError,
    DestinationError,
    DestinationNotFoundError,
    OptionError,
    QuixSinksError,
    RecordError,
    timed_out,
)
from quixsinks.core.secrets import scrub
from quixsinks.core.sink import CommitContext, Receipt, Sink, Task

from .catalog import (
    catalog_properties,
    forget_catalog,
    import_pyiceberg,
    is_timeout,
    load_catalog,
    load_io,
)
from .commit import append_once
from .ledger import SnapshotLedgerStore
from .maintenance import expire_old_snapshots
from .options import IcebergOptions
from .partitioning import QUIX_LAYOUT, PartitionField, parse_partition_by, to_transform
from .quix_layout import conform_schema, layout_schema, layout_table

__all__ = ["IcebergSink", "TablePlan"]

logger = logging.getLogger("quixsinks.sinks.iceberg")

#: the option that bounds every catalog call (named in timeout errors)
TIMEOUT_OPTION = "catalog_timeout_seconds"

#: table properties of the tables this sink creates
NEW_TABLE_PROPERTIES = {
    "commit.manifest-merge.enabled": "true",
    "write.parquet.compression-codec": "zstd",
}

#: (table location) -> monotonic time of this process's last orphan sweep
_SWEPT: dict[str, float] = {}
#: schema commits a task tries to add its JSON's columns (concurrent tasks race)
SCHEMA_MAX_ATTEMPTS = 50
#: a process sweeps one table at most this often
SWEEP_INTERVAL_SECONDS = 3600.0

_PLANS_LOCK = threading.Lock()
_PLANS: dict[tuple[Any, ...], TablePlan] = {}
_METADATA: dict[str, Any] = {}
#: (the plan's table metadata, a batch's parsed JSON schema) -> (the columns as written, the table
#: metadata that holds them): an executor evolves the table once per new JSON shape
_JSON_FITS: dict[tuple[str, pa.Schema], tuple[pa.Schema, Any]] = {}


@dataclass(frozen=True)
class TablePlan:
    """What executors need to write data files: the table's metadata without its history
    (schema, partition spec, properties, location) and its FileIO properties."""

    metadata_json: str
    io_properties: tuple[tuple[str, str], ...] = field(repr=False)
    location: str


def _nullable(schema: pa.Schema) -> pa.Schema:
    """Every top-level column optional: streaming input may hold nulls later."""
    return pa.schema([f.with_nullable(True) for f in schema])


def _check_types(schema: pa.Schema) -> None:
    """Types Iceberg cannot hold fail before any data moves, naming the column."""

    def check(name: str, t: pa.DataType) -> None:
        if pa.types.is_unsigned_integer(t):
            raise OptionError(
                f"iceberg: column {name!r} has type {t}; Iceberg has no unsigned integers: "
                "cast it to a wider signed type (e.g. bigint) first",
                option="columns",
                value=name,
            )
        if pa.types.is_null(t):
            raise OptionError(
                f"iceberg: column {name!r} has no type (NullType, e.g. lit(None)); cast it to "
                "the type the column should have",
                option="columns",
                value=name,
            )
        if pa.types.is_map(t):
            if pa.types.is_nested(t.key_type):
                raise OptionError(
                    f"iceberg: column {name!r} is a map with {t.key_type} keys; this sink "
                    "writes maps with primitive keys only",
                    option="columns",
                    value=name,
                )
            check(f"{name}.value", t.item_type)
        elif pa.types.is_struct(t):
            for child in t:
                check(f"{name}.{child.name}", child.type)
        elif pa.types.is_list(t) or pa.types.is_large_list(t):
            check(f"{name}.element", t.value_type)

    for f in schema:
        check(f.name, f.type)


class IcebergSink(Sink[IcebergOptions, list[Any]]):
    """Appends micro-batches to an Iceberg table, one snapshot each; exactly-once.
    See docs/sinks/iceberg.md."""

    name: ClassVar[str] = "iceberg"
    options_class = IcebergOptions
    guarantee = "exactly-once"
    extra = "iceberg"
    supports_overwrite = True

    def __init__(self, options: IcebergOptions, *, overwrite: bool = False) -> None:
        super().__init__(options, overwrite=overwrite)
        self.plan: TablePlan | None = None
        self.partition_fields: tuple[PartitionField, ...] = ()

    @classmethod
    def check_dependencies(cls) -> None:
        import_pyiceberg()

    def __repr__(self) -> str:
        opts = self.options
        return (
            f"IcebergSink(table_name={opts.table_name!r}, catalog_type={opts.catalog_type!r}, "
            f"warehouse={opts.warehouse!r})"
        )

    # ------------------------------------------------------------------ driver: planning

    def _where(self) -> str:
        return f"iceberg table {self.options.table_name} ({self.options.catalog_type} catalog)"

    def _catalog_error(self, exc: BaseException, what: str) -> DestinationError:
        text = scrub(f"{type(exc).__name__}: {exc}", self.options.secret_values())
        if is_timeout(exc):
            text = f"{timed_out(self.options.catalog_timeout_seconds, TIMEOUT_OPTION)}: {text}"
        return DestinationError(
            f"iceberg: {what} failed for {self._where()}: {text}", location=self._where()
        )

    def _catalog(self) -> Any:
        try:
            return load_catalog(self.options)
        except QuixSinksError:
            raise
        except Exception as exc:
            raise self._catalog_error(exc, "opening the catalog") from None

    def prepare(self, schema: pa.Schema) -> None:
        super().prepare(schema)
        opts = self.options
        assert self.records is not None
        json_values = self.records.value_json
        # a JSON value (Kafka's): Quix's layout, _key and _timestamp now, the value
        # columns added by the executors as each batch's JSON shows them
        rows = layout_schema(schema, self.records) if json_values else schema
        _check_types(rows)
        if opts.partition_by is not None:
            self.partition_fields = parse_partition_by(opts.partition_by)
        elif all(f.source in rows.names for f in QUIX_LAYOUT):
            self.partition_fields = QUIX_LAYOUT
        for pf in self.partition_fields:
            if pf.source not in rows.names:
                note = (
                    " (the value is JSON, parsed per batch: a new table can be partitioned by "
                    "_key and _timestamp only; partition by a JSON key on a table that has "
                    "the column already, or set value_format=columns)"
                    if json_values
                    else ""
                )
                raise OptionError(
                    f"iceberg: 'partition_by' names column {pf.source!r}, which the DataFrame "
                    f"does not have; its columns are: {', '.join(rows.names)}{note}",
                    option="partition_by",
                    value=opts.partition_by,
                )
        key = (opts, schema, self.overwrite)
        with _PLANS_LOCK:
            plan = _PLANS.get(key)
        if plan is None:
            plan = self._ensure_table(rows)
            with _PLANS_LOCK:
                _PLANS[key] = plan
        self.plan = plan

    def _ensure_table(self, schema: pa.Schema) -> TablePlan:
        """Load, create or evolve the table (driver I/O, once per process and schema)."""
        from pyiceberg.exceptions import (
            NoSuchNamespaceError,
            NoSuchTableError,
            TableAlreadyExistsError,
        )

        catalog = self._catalog()
        opts = self.options
        table = None
        for _ in range(5):
            try:
                table = catalog.load_table(opts.table_name)
            except (NoSuchTableError, NoSuchNamespaceError):
                try:
                    table = self._create(catalog, schema)
                except TableAlreadyExistsError:
                    continue
                except QuixSinksError:
                    raise
                except Exception as exc:
                    raise self._catalog_error(exc, "creating the table") from None
            except QuixSinksError:
                raise
            except Exception as exc:
                raise self._catalog_error(exc, "loading the table") from None
            if self._reconcile(table, schema):
                break
        assert table is not None
        return self._plan_of(table)

    def _plan_of(self, table: Any) -> TablePlan:
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

    def _create(self, catalog: Any, schema: pa.Schema) -> Any:
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
                opts.table_name, schema=_nullable(schema), properties=NEW_TABLE_PROPERTIES
            )
            if self.partition_fields:
                with tx.update_spec() as spec:
                    for pf in self.partition_fields:
                        spec.add_field(pf.source, to_transform(pf), pf.name)
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

    def _reconcile(self, table: Any, schema: pa.Schema, source: str = "the DataFrame") -> bool:
        """Check the DataFrame (or a batch's JSON values: ``source``) fits the table; evolve
        it (schema_mode=evolve). False when a concurrent schema change won (reload and try
        again)."""
        from pyiceberg.exceptions import CommitFailedException

        opts = self.options
        current = table.schema()
        names = set(schema.names)
        missing = [f.name for f in current.fields if f.required and f.name not in names]
        if missing:
            raise OptionError(
                f"iceberg: table {opts.table_name} has required columns {source} lacks: "
                f"{', '.join(missing)}",
                option="table_name",
                value=opts.table_name,
            )
        update = table.update_schema()
        try:
            update.union_by_name(_nullable(schema))
            evolved = update._apply()
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

    # ------------------------------------------------------------------ executor

    def _metadata(self) -> Any:
        assert self.plan is not None, "prepare() runs on the driver before any task"
        text = self.plan.metadata_json
        meta = _METADATA.get(text)
        if meta is None:
            from pyiceberg.table.metadata import TableMetadataUtil

            meta = TableMetadataUtil.parse_raw(text)
            if len(_METADATA) > 16:
                _METADATA.clear()
            _METADATA[text] = meta
        return meta

    def _io(self) -> Any:
        assert self.plan is not None
        return load_io(self.plan.io_properties, self.plan.location)

    def check_fence(self, task: Task) -> None:
        context = task.context
        table = self._load_table()
        self.options.ledger(SnapshotLedgerStore(table)).check(context.sink_id, context.query_id)

    def _json_rows(self, batch: Any) -> tuple[pa.Table, Any]:
        """A batch with a JSON value in Quix's layout, and the table metadata to write it
        with: the table's schema is evolved (schema_mode=evolve) when the JSON has keys or
        types it lacks, once per process and JSON shape."""
        assert self.plan is not None
        rows = layout_table(batch)
        cache_key = (self.plan.metadata_json, rows.schema)
        fit = _JSON_FITS.get(cache_key)
        if fit is None:
            fit = self._evolve_for(rows.schema, f"the JSON of batch {batch.batch_id}")
            if len(_JSON_FITS) > 64:
                _JSON_FITS.clear()
            _JSON_FITS[cache_key] = fit
        columns, metadata = fit
        return rows.select(columns.names).cast(columns), metadata

    def _evolve_for(self, parsed: pa.Schema, source: str) -> tuple[pa.Schema, Any]:
        """Evolve the table to hold ``parsed`` (an executor, between tasks of other
        partitions doing the same: a lost race reloads and checks again; each round
        one of the racing tasks wins, so the attempts grow with the number of tasks)."""
        for attempt in range(SCHEMA_MAX_ATTEMPTS):
            table = self._load_table()
            columns = conform_schema(parsed, table.schema())
            try:
                _check_types(columns)
                if self._reconcile(table, columns, source):
                    break
            except OptionError as exc:
                raise RecordError(str(exc)) from None
            time.sleep(random.uniform(0, 0.01 * min(attempt + 1, 10)))  # spread the racers
        else:
            raise CommitError(
                f"iceberg: the schema of {self.options.table_name} kept changing while the "
                f"columns of {source} were being added ({SCHEMA_MAX_ATTEMPTS} attempts)"
            )
        table = self._load_table()
        return conform_schema(parsed, table.schema()), table.metadata

    def write(self, batch: Any) -> list[Any]:
        from pyiceberg.io.pyarrow import _dataframe_to_data_files

        if batch.records.value_json:
            rows, metadata = self._json_rows(batch)
        else:
            rows, metadata = batch.table, self._metadata()
        try:
            files = list(_dataframe_to_data_files(metadata, rows, self._io(), uuid.uuid4()))
        except (ValueError, TypeError) as exc:
            raise RecordError(
                f"iceberg: batch {batch.batch_id} partition {batch.partition_id} cannot be "
                f"written to {self.options.table_name}: {exc}"
            ) from exc
        batch.count("data_files", len(files))
        return files

    # ------------------------------------------------------------------ driver: commit

    def _load_table(self) -> Any:
        try:
            return self._catalog().load_table(self.options.table_name)
        except QuixSinksError:
            raise
        except Exception as exc:
            forget_catalog(self.options)
            raise self._catalog_error(exc, "loading the table") from None

    def commit(self, context: CommitContext, receipts: list[Receipt[list[Any]]]) -> None:
        files = [
            f for r in sorted(receipts, key=lambda r: r.partition_id) for s in r.staged for f in s
        ]
        opts = self.options
        if not files and not self.overwrite:
            return
        outcome = append_once(
            context,
            files,
            load_table=self._load_table,
            ledger=opts.ledger,
            table_name=opts.table_name,
            max_attempts=opts.commit_max_attempts,
            overwrite=self.overwrite,
            scrub=lambda text: scrub(text, opts.secret_values()),
            forget_client=lambda: forget_catalog(opts),
            timeout_seconds=opts.catalog_timeout_seconds,
        )
        if outcome.already_committed:
            # this attempt's data files are not in the table: delete those it does not name
            self._delete_files(files, keep=_referenced(outcome.table))
            return
        self._maintain(outcome.table)
        self._sweep_orphans()

    def _maintain(self, table: Any) -> None:
        """Expire old snapshots (``keep_snapshots``, ``expire_snapshots_older_than``) in
        bulk, never the ledger entries a restart needs (:mod:`.maintenance`); ``table``:
        as this batch's commit left it."""
        opts = self.options
        max_age = opts.expire_older_than_seconds
        expire_old_snapshots(
            table,
            self._load_table,
            opts.keep_snapshots,
            None if max_age is None else int(_now_ms() - max_age * 1000),
            table_name=opts.table_name,
            scrub=lambda text: scrub(text, opts.secret_values()),
            log=logger,
        )

    def _sweep_orphans(self, force: bool = False) -> int:
        """Delete data files under the table's ``data/`` that no snapshot names and that are
        older than ``staging_max_age_hours`` (left by task attempts that died before their
        receipt reached the driver). At most once an hour per process and table; best
        effort (a failure is logged). Returns how many files were deleted."""
        assert self.plan is not None
        location = self.plan.location
        now = time.monotonic()
        if (
            not force
            and now - _SWEPT.get(location, -SWEEP_INTERVAL_SECONDS) < SWEEP_INTERVAL_SECONDS
        ):
            return 0
        _SWEPT[location] = now
        try:
            return self._sweep(location)
        except Exception as exc:
            logger.warning(
                "iceberg: sweeping unreferenced data files of %s failed: %s",
                self.options.table_name,
                scrub(str(exc), self.options.secret_values()),
            )
            return 0

    def _sweep(self, location: str) -> int:
        from pyarrow import fs as pafs

        io = self._io()
        if not hasattr(io, "fs_by_scheme"):
            return 0  # a FileIO without a listing (not pyarrow's)
        scheme, netloc, path = io.parse_location(f"{location.rstrip('/')}/data")
        filesystem = io.fs_by_scheme(scheme, netloc)
        try:
            infos = filesystem.get_file_info(pafs.FileSelector(path, recursive=True))
        except FileNotFoundError:
            return 0
        cutoff = _now_ms() / 1000 - self.options.staging_max_age_hours * 3600
        old = {
            info.path
            for info in infos
            if info.type == pafs.FileType.File
            and info.path.endswith(".parquet")
            and info.mtime is not None
            and info.mtime.timestamp() < cutoff
        }
        if not old:
            return 0
        table = self._load_table()
        referenced = set()
        for snapshot in table.metadata.snapshots:
            for manifest in snapshot.manifests(table.io):
                for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=False):
                    referenced.add(io.parse_location(entry.data_file.file_path)[2])
        orphans = sorted(old - referenced)
        for orphan in orphans:
            filesystem.delete_file(orphan)
        if orphans:
            logger.info(
                "iceberg: deleted %d data files of %s that no snapshot names (older than %.1f h)",
                len(orphans),
                self.options.table_name,
                self.options.staging_max_age_hours,
            )
        return len(orphans)

    def _delete_files(self, files: list[Any], keep: set[str] | None = None) -> None:
        if not files:
            return
        io = self._io()
        for data_file in files:
            if keep is not None and data_file.file_path in keep:
                continue
            try:
                io.delete(data_file.file_path)
            except FileNotFoundError:
                pass
            except Exception as exc:
                logger.warning("iceberg: could not delete %s: %s", data_file.file_path, exc)

    def abort(self, context: CommitContext, receipts: list[Receipt[list[Any]]]) -> None:
        files = [f for r in receipts for s in r.staged for f in s]
        if not files:
            return
        table = self._load_table()
        keep: set[str] | None = None
        if SnapshotLedgerStore(table).get(context.sink_id, context.batch_id) is not None:
            logger.warning(
                "iceberg: abort of batch %d: the batch is committed already; only data files "
                "the table does not name are deleted",
                context.batch_id,
            )
            keep = _referenced(table)
        self._delete_files(files, keep=keep)


def _now_ms() -> float:
    """The wall clock in milliseconds (snapshot timestamps are wall-clock times)."""
    return time.time() * 1000


def _referenced(table: Any) -> set[str]:
    """Data files of the current snapshot (never deleted by a cleanup)."""
    snapshot = table.metadata.current_snapshot()
    if snapshot is None:
        return set()
    paths: set[str] = set()
    for manifest in snapshot.manifests(table.io):
        for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True):
            paths.add(entry.data_file.file_path)
    return paths
