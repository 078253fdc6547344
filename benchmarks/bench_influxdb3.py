"""InfluxDB 3 benchmark: the influxdb3 sink's line protocol and writes vs Quix Streams.

One local session and one throwaway InfluxDB on 127.0.0.1 (``InfluxServer`` from
``tests/services/influxdb.py``: Debian's InfluxDB 1.x behind a Python front that speaks
the InfluxDB 3 write API) take the same cached DataFrame (``--rows`` rows, the
foundation benchmark's six mixed columns) as points of measurement ``bench``: tag
``key`` (``k0`` .. ``k999``), fields ``id`` (integer), ``value`` (float), ``flag``
(boolean), ``name`` (string), time ``timestamp`` (one second apart: unique per row, so
no two points share measurement, tags and time), precision ms:

* ``noop-arrow``: the quixsinks Arrow writer path with a do-nothing sink (the floor of
  every quixsinks sink, as in the foundation benchmark);
* ``lp-generation``: the ``influxdb3`` sink with its HTTP request replaced by nothing
  (a subclass whose ``_send`` returns at once, format ``influxdb3_nosend``): Arrow to
  line protocol, cut into ``batch_size`` bodies; no gzip, no client, no server;
* ``influxdb3-e2e``: the ``influxdb3`` sink into the server (``batch_size=10000``, gzip);
* ``influxdb3-e2e-nogzip``: the same with ``enable_gzip=false`` (informational, no
  target: what gzip costs on a local server);
* ``quix-influxdb3``: Quix Streams' ``InfluxDB3Sink`` into the same server, fed the same
  rows as Python dicts through ``add()`` and one ``flush()`` in this process (from the
  ``dev`` extra); timed on a sample when all rows would take more than a minute per run.

Every run writes into a fresh database (created before and dropped after the run,
outside the timing); after each case's warm-up run the database must hold ``--rows``
points (``count("id")``) with the four fields' types and the one tag.

Targets (issue): ``lp-generation`` >= 0.60 of the floor's rows/s; ``influxdb3-e2e`` >= 5x
``quix-influxdb3``'s rows/s.

Run: ``.venv/bin/python benchmarks/bench_influxdb3.py [--rows N]``.
"""

from __future__ import annotations

import statistics
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness import Bench, Case, Page
from influx import (
    BATCH_SIZE,
    FIELDS,
    MEASUREMENT,
    NOSEND_FORMAT,
    POINTS,
    TAGS,
    TIME,
    Influx,
    NoSendSink,
    QuixFeed,
    database_for,
    influxd_version,
    sink_options,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


@dataclass
class FrontedInflux(Influx):
    """The server behind the InfluxDB 3 front, and what the front saw of each run."""

    traffic: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    def fresh(self, path: str) -> None:
        super().fresh(path)
        self.server.clear_requests()

    def cleanup(self, path: str) -> None:
        """Note the run's write requests (as the front saw them), drop its database."""
        database = database_for(path)
        requests = [r for r in self.server.requests if r.database == database]
        if requests:
            case = Path(path).name.rsplit("-", 1)[0]
            self.traffic.setdefault(case, []).append(request_stats(requests))
        self.server.clear_requests()
        super().cleanup(path)


def request_stats(requests: list[Any]) -> dict[str, Any]:
    """What the front saw of one run: requests, bytes, time spent answering them."""
    seconds = [r.seconds for r in requests]
    body = sum(r.body_bytes for r in requests)
    lp = sum(r.lp_bytes for r in requests)
    return {
        "requests": len(requests),
        "failed": sum(1 for r in requests if r.status >= 300),
        "lines": sum(r.lines for r in requests),
        "gzip": all(r.gzip for r in requests),
        "body_bytes": body,
        "lp_bytes": lp,
        "gzip_ratio": round(lp / body, 2) if body else None,
        # front: read the body, gunzip, forward to influxd and wait for it (summed over
        # requests, which overlap when several tasks write at once)
        "front_seconds_sum": round(sum(seconds), 3),
        "front_seconds_median": round(statistics.median(seconds), 4),
        "span_seconds": round(
            max(r.started + r.seconds for r in requests) - min(r.started for r in requests), 3
        ),
    }


def sink_writer(influx: Influx, sink_format: str, *, gzip: bool = True) -> Any:
    server = influx.server
    options = sink_options(
        host=server.url, token=server.token, enable_gzip="true" if gzip else "false"
    )

    def write(df: DataFrame, path: str) -> None:
        writer = df.write.format(sink_format).mode("append").options(**options)
        writer.option("database", database_for(path)).save()

    return write


def quix_opener(influx: Influx, sink_class: Any, client_class: Any) -> Any:
    """Quix's InfluxDB3Sink, set up: its ``setup()`` minus the InfluxDB 3 check query (Arrow
    Flight, which the stand-in does not serve): the client, and the ping that reads the
    server's version."""
    server = influx.server

    def open_sink(database: str) -> Any:
        sink = sink_class(
            token=server.token,
            host=server.url,
            organization_id="",
            database=database,
            measurement=MEASUREMENT,
            fields_keys=FIELDS,
            tags_keys=TAGS,
            time_precision="ms",
            batch_size=BATCH_SIZE,
            enable_gzip=True,
        )
        sink._client = client_class(**sink._client_args)
        sink._get_influx_version()
        return sink

    return open_sink


def cases(bench: Bench) -> list[Case]:
    server = bench.servers["influxdb"]
    influx = bench.state["influx"] = FrontedInflux(server)
    bench.info.update(influxd=influxd_version(server), points=POINTS, batch_size=BATCH_SIZE)
    found = [
        Case(
            "lp-generation",
            sink_writer(influx, NOSEND_FORMAT),
            "influxdb3 sink without the HTTP request (_send does nothing): Arrow "
            f"to line protocol, bodies of {BATCH_SIZE} lines; no gzip, no server",
            target=0.60,
            count_rows=None,
        ),
        influx.case(
            "influxdb3-e2e",
            sink_writer(influx, "influxdb3"),
            f"influxdb3 sink into the server: batch_size={BATCH_SIZE}, gzip",
        ),
        influx.case(
            "influxdb3-e2e-nogzip",
            sink_writer(influx, "influxdb3", gzip=False),
            "the same with enable_gzip=false (informational: the cost of gzip)",
        ),
    ]
    quix = bench.peer(["quix-influxdb3"], "quixstreams.sinks.core.influxdb3", "InfluxDB3Sink")
    client = bench.peer(["quix-influxdb3"], "influxdb_client_3", "InfluxDBClient3")
    if quix is not None and client is not None:
        feed = QuixFeed(influx, quix_opener(influx, quix, client), with_time=True)
        description = (
            f"Quix Streams InfluxDB3Sink(batch_size={BATCH_SIZE}, enable_gzip=True): "
            "add() per row, one flush(), in one process"
        )
        found.append(bench.sampled(feed.case("quix-influxdb3", description), feed.load))
    return found


NOTES = """
Points: measurement `{measurement}`, tag `key` (`k0` .. `k999`: 1,000 series), fields
`id` (integer), `value` (float), `flag` (boolean), `name` (string), time `{time}`
(one second apart, unique per row: no point overwrites another), precision ms. Every
run writes into a fresh database, dropped after the run; after each warm-up the
database must hold all points, with those field types and that tag. The server is
{influxd} (Debian) behind the test suite's InfluxDB 3 write-API front, a threaded
Python HTTP server in this benchmark's process that gunzips each body and forwards it
to influxd's `/write` (tests/services/influx_front.py); one local disk, WAL fsync on.
`lp-generation` is the `influxdb3` sink with `_send` replaced by nothing (format
`{nosend}`): Arrow columns to line protocol and request bodies of `batch_size` lines,
but no gzip (the client does it), no HTTP, no server. `influxdb3-e2e` is the `influxdb3`
sink (`batch_size={batch}`, `enable_gzip=true`, synchronous requests, one client per
Python worker); `influxdb3-e2e-nogzip` the same with `enable_gzip=false` (informational,
no target). `quix-influxdb3` is Quix Streams {quix_version} `InfluxDB3Sink` with
the same measurement, tags, fields, precision, `batch_size={batch}` and gzip: its
construction, the client and a `/ping` (its `setup()` without the InfluxDB 3 Flight
query, which the stand-in does not serve), one `add()` per row (value = the row's six
columns as a dict, the record timestamp in ms) and one `flush()` in the driver process,
the rows read from the cached DataFrame beforehand{quix_sample}. `vs floor` is rows/s
over `noop-arrow`'s (quixsinks' Arrow writer path with a do-nothing sink).
"""


def notes(bench: Bench) -> str:
    bench.extra["front_traffic"] = bench.state["influx"].traffic
    return NOTES.format(
        measurement=MEASUREMENT,
        time=TIME,
        influxd=(bench.info.get("influxd") or "InfluxDB 1.x").split(" (")[0],
        nosend=NOSEND_FORMAT,
        batch=BATCH_SIZE,
        quix_version=bench.quix_version(),
        quix_sample=bench.quix_note(),
    )


PAGE = Page(
    name="influxdb3",
    title="quixsinks InfluxDB 3 benchmark: line protocol and writes vs Quix Streams",
    doc=__doc__ or "",
    cases=cases,
    case_names=("lp-generation", "influxdb3-e2e", "influxdb3-e2e-nogzip", "quix-influxdb3"),
    targets=(("lp-generation", "noop-arrow", 0.60), ("influxdb3-e2e", "quix-influxdb3", 5.0)),
    notes=notes,
    servers=("influxdb",),
    rows=1_000_000,
    sinks=(NoSendSink,),
)

main = PAGE.main


if __name__ == "__main__":
    sys.exit(main())
