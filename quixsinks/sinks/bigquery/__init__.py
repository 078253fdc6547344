"""``bigquery``: rows into a BigQuery table through the Storage Write API (Arrow), exactly
once per micro-batch.

See docs/sinks/bigquery.md. Needs ``pip install 'quixsinks[bigquery]'``.
"""

from .options import BigQueryOptions
from .sink import BigQuerySink, StagedStream

__all__ = ["BigQueryOptions", "BigQuerySink", "StagedStream"]
