"""``postgresql``: rows into PostgreSQL tables with COPY, exactly once per micro-batch.

See docs/sinks/postgresql.md. Needs ``pip install 'quixsinks[postgresql]'``.
"""

from .modes import StagedRows
from .options import PostgreSQLOptions
from .sink import PostgreSQLSink

__all__ = ["PostgreSQLOptions", "PostgreSQLSink", "StagedRows"]
