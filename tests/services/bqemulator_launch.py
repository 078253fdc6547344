"""Run bqemulator's CLI with the patches it needs offline and for four of its bugs (run
by the emulator's own Python, see bigquery_emulator.py):

* its DuckDB engine loads the ``spatial`` extension at start, which DuckDB downloads:
  impossible offline. The load is skipped, so GEOGRAPHY functions are unavailable (the
  sink never uses them).
* tabledata.list counts rows with ``execute(...).fetchone()``, which leaves a result open
  on the one DuckDB connection, and the next BatchCommitWriteStreams fails with DuckDB's
  "connection has an unfinished result". The commit first drains any open result.
* tables.patch / tables.update record new columns in its catalog but never add them to
  the DuckDB table (queries and Storage Write commits then fail); a schema update that
  adds columns now adds them to the DuckDB table too (``ADD COLUMN IF NOT EXISTS``).
* its Storage Write handler builds the table's Arrow schema without the fields of RECORD
  columns (so any RECORD append fails); it is built from the full REST schema instead.
* its upload route accepts a fixed list of media content types; google-cloud-bigquery's
  load_table_from_file sends ``*/*``, which is added.
* GetWriteStream never sets ``commit_time``, which BigQuery sets on a committed PENDING
  stream ("empty commit_time means it is not committed"): a client that asks after a
  BatchCommitWriteStreams whose answer was lost would take its committed stream for an
  uncommitted one. A committed stream now has a commit time (the time of the question:
  the emulator keeps none).

Nothing else is changed.
"""

import contextlib
import os
import sys

# DuckDB's avro/excel format extensions would be downloaded too: not offline
os.environ.setdefault("BQEMU_ENABLE_FORMAT_EXTENSIONS", "false")

from bqemulator.api.routes import upload
from bqemulator.api.routes.tables import _field_to_rest
from bqemulator.catalog.duckdb_repository import DuckDBCatalogRepository
from bqemulator.catalog.memory_repository import MemoryCatalogRepository
from bqemulator.cli import main
from bqemulator.grpc_api import write_servicer
from bqemulator.storage import engine
from bqemulator.storage.sql_identifiers import quoted_table_ref
from bqemulator.storage.type_map import bq_schema_to_duckdb_columns
from bqemulator.streaming.write_stream import WriteStreamState

engine.DuckDBEngine._load_spatial = lambda self: None  # type: ignore[method-assign]
upload._PERMITTED_MEDIA_CONTENT_TYPES = (*upload._PERMITTED_MEDIA_CONTENT_TYPES, "*/*")
_flush = write_servicer.BigQueryWriteHandler._flush_to_target


def _flush_to_target(self, stream, rows):  # type: ignore[no-untyped-def]
    with contextlib.suppress(Exception):  # none was open
        self._ctx.engine.connection.fetchall()  # drain a result left open
    return _flush(self, stream, rows)


write_servicer.BigQueryWriteHandler._flush_to_target = _flush_to_target  # type: ignore[method-assign]


def _table_arrow_schema(table_meta):  # type: ignore[no-untyped-def]
    from bqemulator.api.routes.tabledata import _build_arrow_schema

    return _build_arrow_schema([_field_to_rest(f) for f in table_meta.schema_.fields])


write_servicer._table_arrow_schema = _table_arrow_schema
_get_write_stream = write_servicer.BigQueryWriteHandler._handle_get_write_stream


def _handle_get_write_stream(self, request_bytes, context):  # type: ignore[no-untyped-def]
    from google.cloud.bigquery_storage_v1 import types

    answer = _get_write_stream(self, request_bytes, context)
    if not answer:  # an error, set on the context
        return answer
    stream = types.WriteStream.deserialize(answer)
    state = self._manager.get(stream.name)
    if state is None or state.state is not WriteStreamState.COMMITTED:
        return answer
    stream.commit_time = write_servicer._now_timestamp()
    return types.WriteStream.serialize(stream)


write_servicer.BigQueryWriteHandler._handle_get_write_stream = _handle_get_write_stream  # type: ignore[method-assign]


def _adding_columns(update):  # type: ignore[no-untyped-def]
    def update_table(self, table):  # type: ignore[no-untyped-def]
        old = self.get_table(table.project_id, table.dataset_id, table.table_id)
        if old is not None:
            have = {f.name.lower() for f in old.schema_.fields}
            new = [f for f in table.schema_.fields if f.name.lower() not in have]
            if new:
                ref = quoted_table_ref(table.project_id, table.dataset_id, table.table_id)
                columns = bq_schema_to_duckdb_columns([_field_to_rest(f) for f in new])
                for name, dtype in columns:
                    self._engine.execute(
                        f'ALTER TABLE {ref} ADD COLUMN IF NOT EXISTS "{name}" {dtype}'
                    )
        return update(self, table)

    return update_table


for _repo in (DuckDBCatalogRepository, MemoryCatalogRepository):
    _repo.update_table = _adding_columns(_repo.update_table)  # type: ignore[method-assign]

if __name__ == "__main__":
    sys.argv = ["bqemulator", *sys.argv[1:]]
    main()
