"""``tsdatalake``: the Quix time-series data lake, Hive-partitioned Parquet, exactly once.

See docs/sinks/tsdatalake.md. Needs only the core (pyarrow); object stores need their
extras (``s3``, ``azure``, ``gcs``).
"""

from .options import TSDataLakeOptions
from .silence import SilenceWatcher, track
from .sink import TSDataLakeSink

__all__ = ["SilenceWatcher", "TSDataLakeOptions", "TSDataLakeSink", "track"]
