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
again and the commit retried (the table layer's :mod:`~quixsinks.core.tables.commit`).
``abort`` re-reads the ledger before deleting files.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import Any, ClassVar

import pyarrow as pa

from quixsinks.core.batch import SinkBatch
from quixsinks.core.clients import ClientCache, client_key
from quixsinks.core.commits import CommitRecord
from quixsinks.core.errors import OptionError, RecordError
from quixsinks.core.secrets import scrub
from quixsinks.core.sink import CommitContext, Receipt, Sink, Task
from quixsinks.core.tables.catalog import load_io
from quixsinks.core.tables.commit import ColumnsGone, append_once
from quixsinks.core.tables.expiry import expire_old_snapshots
from quixsinks.core.tables.ledger import stored_records
from quixsinks.core.tables.partitioning import (
    PartitionField,
    parse_partition_by,
)

from .client import catalog_of, import_pyiceberg
from .ddl import TableDDL, TablePlan
from .files import delete_files, referenced, sweep
from .ledger import SnapshotLedgerStore
from .options import IcebergOptions
from .wire import (
    QUIX_LAYOUT,
    check_types,
    layout_schema,
    layout_table,
    required_nulls,
    write_data_files,
)

__all__ = ["IcebergSink", "TablePlan"]

logger = logging.getLogger("quixsinks.sinks.iceberg")

#: a process sweeps one table at most this often
SWEEP_INTERVAL_SECONDS = 3600.0


def _forget(_value: object) -> None:
    """Nothing to close: these caches hold plans, metadata and times, not connections."""


#: (options, DataFrame schema, overwrite) -> the plan: Spark plans a micro-batch several times
_PLANS: ClientCache[TablePlan] = ClientCache("iceberg table plans", _forget, max_size=16)
#: a plan's metadata JSON -> the parsed table metadata (executors)
_METADATA: ClientCache[Any] = ClientCache("iceberg table metadata", _forget, max_size=16)
#: (the plan's table metadata, a batch's parsed JSON schema) -> (the columns as written, the table
#: metadata that holds them): an executor evolves the table once per new JSON shape
_JSON_FITS: ClientCache[tuple[pa.Schema, Any]] = ClientCache(
    "iceberg JSON schemas", _forget, max_size=64
)
#: (table location) -> [monotonic time of this process's last orphan sweep]
_SWEPT: ClientCache[list[float]] = ClientCache("iceberg orphan sweeps", _forget, max_size=64)


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
        self.plan_key: object = None
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

    def prepare(self, schema: pa.Schema) -> None:
        super().prepare(schema)
        opts = self.options
        assert self.records is not None
        json_values = self.records.value_json
        # a JSON value (Kafka's): Quix's layout, _key and _timestamp now, the value
        # columns added by the executors as each batch's JSON shows them
        rows = layout_schema(schema, self.records) if json_values else schema
        check_types(rows)
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
        key = client_key(opts, opts.catalog_properties_key(), schema, self.overwrite)
        self.plan_key = key
        self.plan = _PLANS.get(key, lambda: self._ddl().ensure(rows, json_values=json_values))

    def _ddl(self) -> TableDDL:
        return TableDDL(self.options, self.partition_fields)

    def _load_table(self) -> Any:
        return self._ddl().load()

    # ------------------------------------------------------------------ executor

    def _metadata(self) -> Any:
        assert self.plan is not None, "prepare() runs on the driver before any task"
        text = self.plan.metadata_json

        def parse() -> Any:
            from pyiceberg.table.metadata import TableMetadataUtil

            return TableMetadataUtil.parse_raw(text)

        return _METADATA.get(text, parse)

    def _io(self) -> Any:
        assert self.plan is not None
        return load_io(dict(self.plan.io_properties), self.plan.location)

    def check_fence(self, task: Task) -> None:
        context = task.context
        table = self._load_table()
        self.options.ledger(SnapshotLedgerStore(table)).check(context.sink_id, context.query_id)

    def _json_rows(self, batch: Any) -> tuple[pa.Table, Any]:
        """A batch with a JSON value in Quix's layout, and the table metadata to write it
        with: the table's schema is evolved (schema_mode=evolve) when the JSON has keys or
        types it lacks, once per process and JSON shape."""
        assert self.plan is not None
        plan = self.plan

        def fit(rows: pa.Table) -> tuple[pa.Schema, Any]:
            return _JSON_FITS.get(
                (plan.metadata_json, rows.schema),
                lambda: self._ddl().evolve_for(rows.schema, f"the JSON of batch {batch.batch_id}"),
            )

        rows = layout_table(batch)
        try:
            columns, metadata = fit(rows)
        except RecordError:
            # a slice of a batch (the glue isolating a bad row) keeps the types the whole
            # batch's JSON gave (1 and 1.5 in one key: double): its own JSON may fit
            own = layout_table(dataclasses.replace(batch, _values=None))
            if own.schema == rows.schema:
                raise
            rows = own
            columns, metadata = fit(rows)
        return rows.select(columns.names).cast(columns), metadata

    def write(self, batch: Any) -> list[Any]:
        """The batch's data files. Rows the table refuses and that the conversion can
        name (a null in a required column, a key that is not text, a JSON key a row
        cannot use) are refused as ``on_error`` says, once the files are written (at once
        under ``on_error=fail``); a refusal pinned to no row (a type the schema cannot
        take, a value pyiceberg's writer refuses) is raised for the whole batch, which
        the glue then splits to find the rows. A write that raises leaves nothing in
        the receipt (a file it wrote is an orphan, swept later)."""
        refused: list[tuple[SinkBatch, int, RecordError]] = []
        while True:
            try:
                files, required = self._write_rows(batch)
                break
            except RecordError as exc:
                if exc.row is None or not 0 <= exc.row < batch.num_rows:
                    raise
                if self.options.on_error == "fail":
                    batch.refuse(exc.row, exc)  # raises, naming the row
                refused.append((batch, exc.row, exc))
                batch = batch.without([exc.row])
        for piece, row, error in [*refused, *required]:
            piece.refuse(row, error)
        batch.count("data_files", len(files))
        return files

    def _write_rows(
        self, batch: SinkBatch
    ) -> tuple[list[Any], list[tuple[SinkBatch, int, RecordError]]]:
        """The data files of the batch's rows less those with a null in a required
        column (returned, to refuse)."""
        if batch.records.value_json:
            rows, metadata = self._json_rows(batch)
        else:
            rows, metadata = batch.table, self._metadata()
        nulls = required_nulls(rows, metadata.schema())
        required: list[tuple[SinkBatch, int, RecordError]] = []
        if nulls:
            for row, column in nulls.items():
                error = RecordError(
                    f"iceberg: column {column!r} of {self.options.table_name} is required, "
                    "and the row has no value for it",
                    column=column,
                    row=row,
                )
                if self.options.on_error == "fail":
                    batch.refuse(row, error)
                required.append((batch, row, error))
            keep = [row for row in range(rows.num_rows) if row not in nulls]
            rows = rows.take(pa.array(keep, pa.int64()))
        if rows.num_rows == 0:
            return [], required
        files = write_data_files(
            metadata, rows, self._io(), table_name=self.options.table_name, batch=batch
        )
        return files, required

    # ------------------------------------------------------------------ driver: commit

    def commit(self, context: CommitContext, receipts: list[Receipt[list[Any]]]) -> None:
        files = [
            f for r in sorted(receipts, key=lambda r: r.partition_id) for s in r.staged for f in s
        ]
        opts = self.options
        if not files and not self.overwrite:
            return
        try:
            outcome = append_once(
                context,
                files,
                catalog=catalog_of(opts),
                load_table=self._load_table,
                table_name=opts.table_name,
                overwrite=self.overwrite,
                record=lambda: context.commit_record(receipts).to_json(),
            )
        except ColumnsGone:
            # planned against a schema the table no longer has: the replay plans again
            _PLANS.discard(self.plan_key)
            _JSON_FITS.clear()
            raise
        if outcome.already_committed:
            # this attempt's data files are not in the table: delete those it does not name
            delete_files(self._io(), files, keep=referenced(outcome.table))
            return
        self._maintain(outcome.table)
        self._sweep_orphans()

    def _maintain(self, table: Any) -> None:
        """Expire old snapshots (``keep_snapshots``, ``expire_snapshots_older_than``) in
        bulk, never the ledger entries a restart needs (:mod:`quixsinks.core.tables.expiry`);
        ``table``: as this batch's commit left it."""
        opts = self.options
        max_age = opts.expire_older_than_seconds
        expire_old_snapshots(
            table,
            self._load_table,
            catalog_of(opts),
            None if max_age is None else int(_now_ms() - max_age * 1000),
            table_name=opts.table_name,
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
        last = _SWEPT.get(location, lambda: [-SWEEP_INTERVAL_SECONDS])
        if not force and now - last[0] < SWEEP_INTERVAL_SECONDS:
            return 0
        last[0] = now
        cutoff = _now_ms() / 1000 - self.options.staging_max_age_hours * 3600
        try:
            orphans = sweep(self._io(), location, self._load_table, cutoff)
        except Exception as exc:
            logger.warning(
                "iceberg: sweeping unreferenced data files of %s failed: %s",
                self.options.table_name,
                scrub(str(exc), self.options.secret_values()),
            )
            return 0
        if orphans:
            logger.info(
                "iceberg: deleted %d data files of %s that no snapshot names (older than %.1f h)",
                len(orphans),
                self.options.table_name,
                self.options.staging_max_age_hours,
            )
        return len(orphans)

    def commit_records(self, sink_id: str | None = None) -> list[CommitRecord]:
        """The commit records in the summaries of the table's snapshots (main branch),
        oldest first; snapshots committed before records were kept have none, and snapshot
        expiry removes records with their snapshots. Needs no ``prepare``: the table is
        loaded through the catalog (with its timeouts)."""
        table = self._load_table()
        return [CommitRecord.from_json(text) for text in stored_records(table, sink_id)]

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
            keep = referenced(table)
        delete_files(self._io(), files, keep=keep)


def _now_ms() -> float:
    """The wall clock in milliseconds (snapshot timestamps are wall-clock times)."""
    return time.time() * 1000
