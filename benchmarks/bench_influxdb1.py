"""InfluxDB 1.x benchmark: the influxdb1 sink vs Quix Streams' sink and influx -import.

The server's own bulk loader (``influx -import``) and Quix Streams' ``InfluxDB1Sink`` write
into the same server as the sink, in one interleaved run.

One local session and one throwaway InfluxDB 1.x on 127.0.0.1 (``InfluxServer`` from
``tests/services/influxdb.py``; every case talks to influxd's own HTTP port, not to the
test front) take the same cached DataFrame (``--rows`` rows, the foundation benchmark's
six mixed columns) as points of measurement ``bench``: tag ``key`` (``k0`` .. ``k999``),
fields ``id`` (integer), ``value`` (float), ``flag`` (boolean), ``name`` (string), time
``timestamp`` (one second apart: unique per row), precision ms:

* ``noop-arrow``: the quixsinks Arrow writer path with a do-nothing sink (the floor);
* ``influxdb1-e2e``: the ``influxdb1`` sink into the server (``batch_size=10000``, no
  gzip: its default, as Quix's);
* ``influxdb1-e2e-gzip``: the same with ``enable_gzip=true`` (informational);
* ``quix-influxdb1``: Quix Streams' ``InfluxDB1Sink`` (influxdb-python), fed the same rows
  as Python dicts through ``add()`` and one ``flush()`` in this process; timed on a sample
  when all rows would take more than a minute per run;
* ``influx-import``: ``influx -import`` (Debian's ``influxdb-client``) of a file holding
  the same points as line protocol (made by the sinks' encoder before the timing): one Go
  process posting batches of 5,000 points, the server's ceiling for one writer.

Every run writes into a fresh database (created before and dropped after the run,
outside the timing); after each warm-up the database must hold every point
(``count("id")``) with the four fields' types and the one tag.

Targets (issue): ``influxdb1-e2e`` >= 5x ``quix-influxdb1``'s rows/s and >= 0.5x
``influx-import``'s.

Run: ``.venv/bin/python benchmarks/bench_influxdb1.py [--rows N]``.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness import Bench, Case, Page, command_output
from influx import (
    BATCH_SIZE,
    FIELDS,
    MEASUREMENT,
    POINTS,
    PRECISION,
    TAGS,
    TIME,
    Influx,
    QuixFeed,
    database_for,
    influxd_version,
    sink_options,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

IMPORT_TIMEOUT_S = 1800


def sink_writer(influx: Influx, *, gzip: bool = False) -> Any:
    server = influx.server
    options = sink_options(
        host=server.host,
        port=str(server.influx_port),
        enable_gzip="true" if gzip else "false",
    )

    def write(df: DataFrame, path: str) -> None:
        writer = df.write.format("influxdb1").mode("append").options(**options)
        writer.option("database", database_for(path)).save()

    return write


@dataclass
class ImportFeed:
    """The points as line protocol (the sinks' encoder), and ``influx -import`` of them."""

    influx: Influx
    body: bytes = b""

    def load(self, table: Any) -> None:
        """Line protocol of ``table`` (pyarrow), made once, outside every timed run."""
        from quixsinks.core.arrow import join_lines
        from quixsinks.sinks.influxdb3.wire import LineProtocol, timestamps

        protocol = LineProtocol(MEASUREMENT, None, TAGS, FIELDS, precision=PRECISION)
        columns = {name: table.column(name).combine_chunks() for name in (*TAGS, *FIELDS)}
        times = timestamps(table.column(TIME), PRECISION, name=TIME)
        lines, _ = protocol.lines(columns, times, table.num_rows)
        self.body = join_lines(lines, b"").to_pybytes()

    def file_for(self, path: str) -> Path:
        return Path(path + ".lp")

    def setup(self, path: str) -> None:
        self.influx.fresh(path)
        header = f"# DML\n# CONTEXT-DATABASE: {database_for(path)}\n".encode()
        self.file_for(path).write_bytes(header + self.body)

    def cleanup(self, path: str) -> None:
        self.file_for(path).unlink(missing_ok=True)
        self.influx.cleanup(path)

    def write(self, df: DataFrame, path: str) -> None:
        server = self.influx.server
        command = ["influx", "-host", server.host, "-port", str(server.influx_port)]
        command += ["-import", "-path", str(self.file_for(path)), "-precision", PRECISION]
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=IMPORT_TIMEOUT_S, check=False
        )
        output = (done.stdout + done.stderr).strip()
        if done.returncode != 0 or "Failed 0 inserts" not in output:
            raise RuntimeError(f"influx -import failed (exit {done.returncode}): {output[-500:]}")


def quix_opener(influx: Influx, sink_class: Any) -> Any:
    """Quix's InfluxDB1Sink, constructed and set up."""
    server = influx.server

    def open_sink(database: str) -> Any:
        sink = sink_class(
            host=server.host,
            port=server.influx_port,
            database=database,
            measurement=MEASUREMENT,
            fields_keys=FIELDS,
            tags_keys=TAGS,
            time_precision=PRECISION,
            batch_size=BATCH_SIZE,
        )
        sink.setup()
        return sink

    return open_sink


def cases(bench: Bench) -> list[Case]:
    server = bench.servers["influxdb"]
    influx = Influx(server)
    cli = command_output(["influx", "-version"])  # "InfluxDB shell version: 1.6.7~rc0"
    bench.info.update(
        influxd=influxd_version(server),
        influx_cli=("influx " + cli.rsplit(":", 1)[-1].strip()) if cli else None,
        points=POINTS,
        batch_size=BATCH_SIZE,
    )
    found = [
        influx.case(
            "influxdb1-e2e",
            sink_writer(influx),
            f"influxdb1 sink into the server: batch_size={BATCH_SIZE}, no gzip (its default)",
        ),
        influx.case(
            "influxdb1-e2e-gzip",
            sink_writer(influx, gzip=True),
            "the same with enable_gzip=true (informational)",
        ),
    ]
    if shutil.which("influx") is None:
        bench.skip("influx-import", "no `influx` CLI: run make services")
    elif bench.wants("influx-import"):
        feed = ImportFeed(influx)
        feed.load(bench.arrow())
        description = (
            "influx -import (influxdb-client) of the same points as a line-protocol file "
            "made beforehand: the server's own bulk loader, one process"
        )
        found.append(
            influx.case(
                "influx-import", feed.write, description, setup=feed.setup, cleanup=feed.cleanup
            )
        )
    quix = bench.peer(["quix-influxdb1"], "quixstreams.sinks.community.influxdb1", "InfluxDB1Sink")
    if quix is not None:
        quix_feed = QuixFeed(influx, quix_opener(influx, quix))
        description = (
            f"Quix Streams InfluxDB1Sink(batch_size={BATCH_SIZE}): add() per row, one "
            "flush(), in one process"
        )
        found.append(bench.sampled(quix_feed.case("quix-influxdb1", description), quix_feed.load))
    return found


NOTES = """
Points: measurement `{measurement}`, tag `key` (`k0` .. `k999`: 1,000 series), fields
`id` (integer), `value` (float), `flag` (boolean), `name` (string), time `timestamp`
(one second apart, unique per row), precision ms. Every run writes into a fresh
database, dropped after the run; after each warm-up the database must hold all points,
with those field types and that tag. The server is {influxd} (Debian), every case on its
own HTTP port (no proxy); one local disk, WAL fsync on. `influxdb1-e2e` is the
`influxdb1` sink (`batch_size={batch}`, `enable_gzip=false`, its default; synchronous
requests through urllib3, one pool per Python worker); `influxdb1-e2e-gzip` the same with
`enable_gzip=true` (informational). `quix-influxdb1` is Quix Streams {quix_version}
`InfluxDB1Sink` (influxdb-python) with the same measurement, tags, fields, precision and
`batch_size={batch}`: its construction and `setup()`, one `add()` per row (value = the
row's five value columns as a dict, the record timestamp in ms) and one `flush()` in the
driver process, the rows read from the cached DataFrame beforehand{quix_sample}.
`influx-import` is `{influx_cli}` `-import` of a file with the same points, made by the
sinks' line-protocol encoder before the timing. `vs floor` is rows/s over `noop-arrow`'s.
"""


def notes(bench: Bench) -> str:
    return NOTES.format(
        measurement=MEASUREMENT,
        influxd=(bench.info.get("influxd") or "InfluxDB 1.x").split(" (")[0],
        batch=BATCH_SIZE,
        quix_version=bench.quix_version(),
        influx_cli=bench.info.get("influx_cli") or "influx",
        quix_sample=bench.quix_note(),
    )


PAGE = Page(
    name="influxdb1",
    title="quixsinks InfluxDB 1.x benchmark: writes vs Quix Streams and influx -import",
    doc=__doc__ or "",
    cases=cases,
    case_names=("influxdb1-e2e", "influxdb1-e2e-gzip", "quix-influxdb1", "influx-import"),
    targets=(("influxdb1-e2e", "quix-influxdb1", 5.0), ("influxdb1-e2e", "influx-import", 0.5)),
    notes=notes,
    servers=("influxdb",),
    rows=1_000_000,
)

main = PAGE.main


if __name__ == "__main__":
    sys.exit(main())
