"""What the two InfluxDB pages (``bench_influxdb1.py``, ``bench_influxdb3.py``) share.

The points both write (measurement ``bench``: tag ``key``, fields ``id`` integer, ``value``
float, ``flag`` boolean, ``name`` string, time ``timestamp`` one second apart, precision
ms), the server's database per run (checked: field types, the tag, every point) and Quix
Streams' sink fed the same rows as Python dicts, one ``add()`` per row and one
``flush()``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from harness import Case, Destination, command_output, run_name
from harness.quix import add_all

from quixsinks.sinks.influxdb3 import InfluxDB3Sink

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

MEASUREMENT = "bench"
TAGS = ("key",)
FIELDS = ("id", "value", "flag", "name")
TIME = "timestamp"
PRECISION = "ms"
BATCH_SIZE = 10_000
#: what the fields must be stored as (InfluxQL SHOW FIELD KEYS)
FIELD_TYPES = {"id": "integer", "value": "float", "flag": "boolean", "name": "string"}
#: the points, for the JSON
POINTS = {
    "measurement": MEASUREMENT,
    "tags": list(TAGS),
    "fields": FIELD_TYPES,
    "time": TIME,
    "precision": PRECISION,
    "series": 1000,
}

database_for = run_name

NOSEND_FORMAT = "influxdb3_nosend"


class NoSendSink(InfluxDB3Sink):
    """The influxdb3 sink without its HTTP request: everything up to the request body.

    Spark's workers cannot import this module: ``register_sinks`` pickles it by value (it
    defines a base class of a page's sink); the base class is quixsinks' own, imported by
    reference in the workers.
    """

    name: ClassVar[str] = NOSEND_FORMAT
    #: False: no server at all, not even the preflight's ping
    ping: ClassVar[bool] = True

    def preflight(self) -> None:
        if self.ping:
            super().preflight()

    def _send(self, body: bytes) -> bool:
        return True


def influxd_version(server: Any) -> str | None:
    return command_output([str(server.influxd), "version"])


@dataclass
class Influx(Destination):
    """The throwaway server and one database per run (created before, dropped after)."""

    server: Any

    def fresh(self, path: str) -> None:
        database = database_for(path)
        self.server.drop_database(database)
        self.server.create_database(database)

    def cleanup(self, path: str) -> None:
        self.server.drop_database(database_for(path))

    def count_rows(self, path: str) -> int:
        """Points in the run's database, after checking the fields' types and the tag."""
        database = database_for(path)
        types = self.server.field_types(database, MEASUREMENT)
        if types != FIELD_TYPES:
            raise RuntimeError(f"{database}: fields {types}, expected {FIELD_TYPES}")
        tags = [row["tagKey"] for row in self.server.query(database, "SHOW TAG KEYS")]
        if tags != list(TAGS):
            raise RuntimeError(f"{database}: tag keys {tags}, expected {list(TAGS)}")
        rows = self.server.query(database, f'SELECT count("id") FROM "{MEASUREMENT}"')
        return int(rows[0]["count"]) if rows else 0


@dataclass
class QuixFeed:
    """A Quix Streams InfluxDB sink and the rows it is fed (built outside the timing).

    ``open_sink(database)`` constructs and sets the sink up (timed, as Quix pays for it
    per process); ``with_time``: whether the record values keep the time column.
    """

    influx: Influx
    open_sink: Callable[[str], Any]
    with_time: bool = False
    rows: list[dict[str, Any]] = field(default_factory=list)
    timestamps_ms: list[int] = field(default_factory=list)
    values: list[dict[str, Any]] = field(default_factory=list)
    keys: list[str] = field(default_factory=list)

    def load(self, table: Any) -> None:
        """The rows of ``table`` (pyarrow) as Quix record values and timestamps (ms)."""
        import pyarrow as pa

        self.rows = (table if self.with_time else table.drop_columns([TIME])).to_pylist()
        stamps = table.column(TIME).cast(pa.timestamp("ms", tz="UTC")).cast(pa.int64())
        self.timestamps_ms = stamps.to_pylist()

    def setup(self, path: str) -> None:
        """New dicts for the next run (Quix's ``write`` pops the tag keys out of them)."""
        self.influx.fresh(path)
        self.values = [dict(row) for row in self.rows]
        self.keys = [row["key"] for row in self.rows]

    def write(self, df: DataFrame, path: str) -> None:
        """Construct the sink, add() every row, flush(): all timed."""
        sink = self.open_sink(database_for(path))
        try:
            add_all(sink, self.values, self.keys, self.timestamps_ms)
        finally:
            sink._client.close()

    def case(self, name: str, description: str) -> Case:
        return self.influx.case(name, self.write, description, setup=self.setup)


def sink_options(**more: str) -> dict[str, str]:
    """The options of both sinks for these points (``more``: the server's)."""
    return {
        "measurement": MEASUREMENT,
        "tags_keys": ",".join(TAGS),
        "fields_keys": ",".join(FIELDS),
        "time_key": TIME,
        "time_precision": PRECISION,
        "batch_size": str(BATCH_SIZE),
        **more,
    }
