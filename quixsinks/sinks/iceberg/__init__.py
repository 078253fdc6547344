"""``iceberg``: Apache Iceberg tables through pyiceberg, exactly-once per micro-batch.

See docs/sinks/iceberg.md. Needs ``pip install 'quixsinks[iceberg]'``.
"""

from .options import IcebergOptions
from .sink import IcebergSink

__all__ = ["IcebergOptions", "IcebergSink"]
