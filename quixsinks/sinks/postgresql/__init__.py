"""``postgresql``: rows into PostgreSQL tables with COPY, exactly once per micro-batch.

See docs/sinks/postgresql.md. Needs ``pip install 'quixsinks[postgresql]'``.
"""

from quixsinks.spark.datasource import QuixDataSource

from .options import PostgreSQLOptions
from .sink import PostgreSQLSink, StagedRows

__all__ = ["PostgreSQLDataSource", "PostgreSQLOptions", "PostgreSQLSink", "StagedRows"]


class PostgreSQLDataSource(QuixDataSource):
    """``df.write.format("postgresql")`` / ``df.writeStream.format("postgresql")``.

    Options (snake_case or camelCase): ``dbname`` and ``table_name`` or
    ``table_name_column`` are required; ``host``, ``port``, ``user``, ``password`` (or
    PGPASSWORD), ``schema_name``, ``schema_auto_update``, ``primary_key_columns``,
    ``upsert_on_primary_key``, ``on_conflict_do_nothing``, ``include_metadata``,
    ``write_mode``, ``sslmode``, ``connect_options``, timeouts, and the common options.
    Save modes append and overwrite (truncate in the load's transaction); streaming
    output modes append and complete. Guarantee: exactly-once (write_mode=exactly-once).
    """

    sink_class = PostgreSQLSink
