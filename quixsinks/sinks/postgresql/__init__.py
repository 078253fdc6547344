"""``postgresql``: rows into PostgreSQL tables with COPY, exactly once per micro-batch.

See docs/sinks/postgresql.md. Needs ``pip install 'quixsinks[postgresql]'``.
"""

from .options import PostgreSQLOptions
from .sink import PostgreSQLSink, StagedRows

__all__ = ["PostgreSQLOptions", "PostgreSQLSink", "StagedRows"]
