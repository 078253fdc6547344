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
  rows as Python dicts through ``add()`` and one ``flush()`` in this process (installed
  with pip into this environment on first use); timed on a sample when all rows would
  take more than ``QUIX_MAX_SECONDS`` per run.

Every run writes into a fresh database (created before and dropped after the run,
outside the timing); after each case's warm-up run the database must hold ``--rows``
points (``count("id")``) with the four fields' types and the one tag.

Targets (issue): ``lp-generation`` >= 0.60 of the floor's rows/s; ``influxdb3-e2e`` >= 5x
``quix-influxdb3``'s rows/s.

Run: ``.venv/bin/python benchmarks/bench_influxdb3.py [--rows N]``.
"""

from __future__ import annotations

import contextlib
import importlib
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from common import (
    BENCH_DIR,
    FLOOR,
    Case,
    RelativeTarget,
    argument_parser,
    bench_session,
    close_session,
    floor_case,
    import_or_install,
    judge_targets,
    machine_info,
    mixed_dataframe,
    register_floor,
    run_cases,
    selected_cases,
    targets_markdown,
    write_results,
)

import quixsinks
from quixsinks.sinks.influxdb3 import InfluxDB3Sink

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

NAME = "influxdb3"
ROOT = BENCH_DIR.parent
MEASUREMENT = "bench"
TAGS = ("key",)
FIELDS = ("id", "value", "flag", "name")
TIME = "timestamp"
PRECISION = "ms"
BATCH_SIZE = 10_000
#: what the fields must be stored as (InfluxQL SHOW FIELD KEYS)
FIELD_TYPES = {"id": "integer", "value": "float", "flag": "boolean", "name": "string"}
NOSEND_FORMAT = "influxdb3_nosend"

QUIX_SPEC = "quixstreams[influxdb3]"
QUIX_MODULE = "quixstreams.sinks.core.influxdb3"
PIP_TIMEOUT_S = 600
#: Quix's sink is timed on all rows only if that takes at most this long (per run) ...
QUIX_MAX_SECONDS = 60.0
#: ... else on this many rows
QUIX_SAMPLE_ROWS = 100_000
#: rows of the probe that decides between the two
QUIX_PROBE_ROWS = 20_000

CASE_NAMES = ("lp-generation", "influxdb3-e2e", "influxdb3-e2e-nogzip", "quix-influxdb3")

TARGETS: tuple[RelativeTarget, ...] = (
    ("lp-generation", FLOOR, 0.60),
    ("influxdb3-e2e", "quix-influxdb3", 5.0),
)


def log(line: str) -> None:
    print(line, flush=True)


def database_for(path: str) -> str:
    """The database of one run: named after the harness's fresh path (``<case>-<run>``)."""
    stem = "".join(c if c.isalnum() else "_" for c in Path(path).name.lower())
    return f"bench_{stem}"


# --------------------------------------------------------------------------- the sink, no HTTP


class InfluxDB3NoSendSink(InfluxDB3Sink):
    """The influxdb3 sink without its HTTP request: everything up to the request body.

    Defined here (``__main__``, or a module ``quick.py`` registers for pickling by value),
    so Spark pickles it by value; its base class is quixsinks' own, imported by reference
    in the workers.
    """

    name: ClassVar[str] = NOSEND_FORMAT

    def _send(self, body: bytes) -> bool:
        return True


# --------------------------------------------------------------------------- the server


@dataclass
class Influx:
    """The throwaway server, one database per run, and what the front saw of each run."""

    server: Any  # tests.services.influxdb.InfluxServer
    traffic: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    def fresh(self, path: str) -> None:
        database = database_for(path)
        self.server.drop_database(database)
        self.server.create_database(database)
        self.server.clear_requests()

    def cleanup(self, path: str) -> None:
        """Note the run's write requests (as the front saw them), drop its database."""
        database = database_for(path)
        requests = [r for r in self.server.requests if r.database == database]
        if requests:
            case = Path(path).name.rsplit("-", 1)[0]
            self.traffic.setdefault(case, []).append(request_stats(requests))
        self.server.clear_requests()
        self.server.drop_database(database)

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


def influxd_version(server: Any) -> str | None:
    try:
        done = subprocess.run(
            [str(server.influxd), "version"], capture_output=True, text=True, timeout=30
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return (done.stdout or done.stderr).strip() or None


# --------------------------------------------------------------------------- cases


def sink_writer(
    influx: Influx, sink_format: str, *, gzip: bool = True
) -> Callable[[DataFrame, str], None]:
    server = influx.server
    options = {
        "host": server.url,
        "token": server.token,
        "measurement": MEASUREMENT,
        "tags_keys": ",".join(TAGS),
        "fields_keys": ",".join(FIELDS),
        "time_key": TIME,
        "time_precision": PRECISION,
        "batch_size": str(BATCH_SIZE),
        "enable_gzip": "true" if gzip else "false",
    }

    def write(df: DataFrame, path: str) -> None:
        (
            df.write.format(sink_format)
            .mode("append")
            .options(**options)
            .option("database", database_for(path))
            .save()
        )

    return write


@dataclass
class QuixFeed:
    """Quix Streams' InfluxDB3Sink and the rows it is fed (built outside the timing)."""

    sink_class: Any
    client_class: Any
    influx: Influx
    rows: list[dict[str, Any]] = field(default_factory=list)
    timestamps_ms: list[int] = field(default_factory=list)
    values: list[dict[str, Any]] = field(default_factory=list)

    def load(self, table: Any) -> None:
        """The rows of ``table`` (pyarrow) as Quix record values and timestamps (ms)."""
        import pyarrow as pa

        self.rows = table.to_pylist()
        stamps = table.column(TIME).cast(pa.timestamp("ms", tz="UTC")).cast(pa.int64())
        self.timestamps_ms = stamps.to_pylist()

    def fresh_values(self, count: int) -> None:
        """New dicts for the next run: Quix's ``write`` pops the tag keys out of them."""
        self.values = [dict(row) for row in self.rows[:count]]

    def run(self, database: str, count: int) -> None:
        """Construct the sink, connect, add() ``count`` rows, flush(): all timed."""
        server = self.influx.server
        sink = self.sink_class(
            token=server.token,
            host=server.url,
            organization_id="",
            database=database,
            measurement=MEASUREMENT,
            fields_keys=FIELDS,
            tags_keys=TAGS,
            time_precision=PRECISION,
            batch_size=BATCH_SIZE,
            enable_gzip=True,
        )
        # sink.setup() minus its InfluxDB 3 check query (Arrow Flight, which the stand-in
        # does not serve): the client, and the ping that reads the server's version
        sink._client = self.client_class(**sink._client_args)
        try:
            sink._get_influx_version()
            add = sink.add
            values = self.values
            stamps = self.timestamps_ms
            for offset in range(count):
                value = values[offset]
                add(
                    value=value,
                    key=value["key"],
                    timestamp=stamps[offset],
                    headers=[],
                    topic="bench",
                    partition=0,
                    offset=offset,
                )
            sink.flush()
        finally:
            sink._client.close()

    def case(self, count: int, all_rows: int) -> Case:
        influx = self.influx

        def setup(path: str) -> None:
            influx.fresh(path)
            self.fresh_values(count)

        def write(df: DataFrame, path: str) -> None:
            self.run(database_for(path), count)

        return Case(
            "quix-influxdb3",
            write,
            f"Quix Streams InfluxDB3Sink(batch_size={BATCH_SIZE}, enable_gzip=True): "
            "add() per row, one flush(), in one process"
            + ("" if count == all_rows else f" ({count:_} rows)"),
            count_rows=influx.count_rows,
            setup=setup,
            cleanup=influx.cleanup,
            rows=count,
        )


def _load_quix() -> tuple[Any, Any]:
    with warnings.catch_warnings():  # its dependencies' deprecation warnings
        warnings.simplefilter("ignore")
        with contextlib.suppress(ImportError):  # it adds an "always" filter when imported
            importlib.import_module("authlib.deprecate")
        warnings.simplefilter("ignore")
        sink_class = importlib.import_module(QUIX_MODULE).InfluxDB3Sink
        client_class = importlib.import_module("influxdb_client_3").InfluxDBClient3
    return sink_class, client_class


def quix_rows_for(
    feed: QuixFeed, arrow: Any, rows: int, asked: int | None
) -> tuple[int, dict[str, Any]]:
    """All rows if Quix takes <= QUIX_MAX_SECONDS for them (a probe decides), else a sample.

    Leaves ``feed`` loaded with the rows to time.
    """
    if asked is not None:
        chosen = min(asked, rows)
        feed.load(arrow.slice(0, chosen))
        return chosen, {"decided_by": "--quix-rows"}
    probe = min(rows, QUIX_PROBE_ROWS)
    feed.load(arrow.slice(0, probe))
    feed.fresh_values(probe)
    path = "quix-probe"
    feed.influx.fresh(path)
    started = time.perf_counter()
    try:
        feed.run(database_for(path), probe)
    finally:
        seconds = time.perf_counter() - started
        feed.influx.server.drop_database(database_for(path))
        feed.influx.server.clear_requests()
    estimate = rows * seconds / probe
    chosen = rows if estimate <= QUIX_MAX_SECONDS else min(rows, QUIX_SAMPLE_ROWS)
    log(
        f"Quix probe: {probe:_} rows in {seconds:.2f} s ({probe / seconds:,.0f} rows/s); "
        f"{rows:_} rows would take ~{estimate:.0f} s: timing Quix on {chosen:_} rows"
    )
    feed.load(arrow.slice(0, chosen))
    return chosen, {
        "decided_by": "probe",
        "probe_rows": probe,
        "probe_seconds": round(seconds, 3),
        "estimated_seconds_for_all_rows": round(estimate, 1),
        "max_seconds": QUIX_MAX_SECONDS,
    }


NOTES = """
Targets (issue), on the best times' rows/s:

{targets}
Points: measurement `{measurement}`, tag `key` (`k0` .. `k999`: 1,000 series), fields
`id` (integer), `value` (float), `flag` (boolean), `name` (string), time `timestamp`
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


# --------------------------------------------------------------------------- main


def parse_args(argv: list[str] | None) -> Any:
    parser = argument_parser(__doc__.splitlines()[0], rows=1_000_000)
    parser.add_argument(
        "--quix-rows",
        type=int,
        default=None,
        help="rows to time Quix Streams' sink on (default: all rows if a probe says they "
        f"take <= {QUIX_MAX_SECONDS:.0f} s, else {QUIX_SAMPLE_ROWS:_})",
    )
    parser.add_argument(
        "--no-install",
        action="store_true",
        help=f"do not pip-install '{QUIX_SPEC}' when missing (skip its case)",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    partitions = args.partitions or args.cores
    wanted = selected_cases(args.cases, CASE_NAMES)
    skipped: dict[str, str] = {}

    # quixstreams first: a pip install must not run while Spark and the server are up
    quix: tuple[Any, Any] | None = None
    if "quix-influxdb3" in wanted:
        quix, reason = import_or_install(
            QUIX_SPEC, _load_quix, install=not args.no_install, timeout_s=PIP_TIMEOUT_S, log=log
        )
        if reason:
            skipped["quix-influxdb3"] = reason
            log(f"skipping quix-influxdb3: {reason}")

    sys.path.insert(0, str(ROOT))
    from tests.services.influxdb import InfluxServer

    workdir = Path(tempfile.mkdtemp(prefix="quixsinks-bench-influx-", dir=args.tmp))
    extra_info: dict[str, Any] = {}
    log("starting a throwaway InfluxDB (1.x + InfluxDB 3 front) ...")
    with InfluxServer() as server:
        influx = Influx(server)
        spark = bench_session("quixsinks-bench-influxdb3", args.cores, verbose=args.verbose)
        try:
            quixsinks.register(spark)
            register_floor(spark)
            quixsinks.register(spark, InfluxDB3NoSendSink)
            log(f"building {args.rows:_} cached rows in {partitions} partitions ...")
            df = mixed_dataframe(spark, args.rows, partitions)

            cases = [
                floor_case(),
                Case(
                    "lp-generation",
                    sink_writer(influx, NOSEND_FORMAT),
                    "influxdb3 sink without the HTTP request (_send does nothing): Arrow "
                    f"to line protocol, bodies of {BATCH_SIZE} lines; no gzip, no server",
                    target=0.60,
                    count_rows=None,
                ),
                Case(
                    "influxdb3-e2e",
                    sink_writer(influx, "influxdb3"),
                    f"influxdb3 sink into the server: batch_size={BATCH_SIZE}, gzip",
                    count_rows=influx.count_rows,
                    setup=influx.fresh,
                    cleanup=influx.cleanup,
                ),
                Case(
                    "influxdb3-e2e-nogzip",
                    sink_writer(influx, "influxdb3", gzip=False),
                    "the same with enable_gzip=false (informational: the cost of gzip)",
                    count_rows=influx.count_rows,
                    setup=influx.fresh,
                    cleanup=influx.cleanup,
                ),
            ]
            if quix is not None:
                arrow = df.toArrow()  # once, outside every timed run
                feed = QuixFeed(*quix, influx)
                quix_rows, decision = quix_rows_for(feed, arrow, args.rows, args.quix_rows)
                del arrow
                extra_info["quix"] = {
                    "quixstreams": importlib.import_module("quixstreams").__version__,
                    "rows": quix_rows,
                    **decision,
                }
                cases.append(feed.case(quix_rows, args.rows))
            cases = [c for c in cases if c.name in wanted or c.name == FLOOR]
            results = run_cases(
                df,
                cases,
                floor=FLOOR,
                rows=args.rows,
                repeat=args.repeat,
                workdir=workdir,
                log=log,
            )
            info = machine_info(
                spark,
                rows=args.rows,
                repeat=args.repeat,
                partitions=partitions,
                cores=args.cores,
                columns=dict(df.dtypes),
                influxd=influxd_version(server),
                points={
                    "measurement": MEASUREMENT,
                    "tags": list(TAGS),
                    "fields": FIELD_TYPES,
                    "time": TIME,
                    "precision": PRECISION,
                    "series": 1000,
                },
                batch_size=BATCH_SIZE,
                enable_gzip=True,
                **extra_info,
            )
            df.unpersist()
        finally:
            close_session(spark)
            shutil.rmtree(workdir, ignore_errors=True)
    log("InfluxDB stopped")

    judged, verdict = judge_targets(results, TARGETS, skipped)
    quix_info = info.get("quix")
    notes = NOTES.format(
        targets=targets_markdown(judged),
        measurement=MEASUREMENT,
        influxd=(info.get("influxd") or "InfluxDB 1.x").split(" (")[0],
        nosend=NOSEND_FORMAT,
        batch=BATCH_SIZE,
        quix_version=quix_info["quixstreams"] if quix_info else "(not run)",
        quix_sample=(
            f"; timed on the first {quix_info['rows']:,} rows (all {args.rows:,} would take "
            f"~{quix_info.get('estimated_seconds_for_all_rows', '?')} s per run), its rows/s "
            "compared as is"
            if quix_info and quix_info["rows"] != args.rows
            else ""
        ),
    )
    markdown = write_results(
        args.out,
        NAME,
        title="quixsinks InfluxDB 3 benchmark: line protocol and writes vs Quix Streams",
        info=info,
        results=results,
        floor=FLOOR,
        notes=notes,
        skipped=skipped,
        extra={
            "targets": judged,
            "all_targets_passed": verdict,
            "front_traffic": influx.traffic,
        },
    )
    print()
    print(markdown)
    print(f"wrote {args.out / (NAME + '.json')} and {args.out / (NAME + '.md')}")
    failed = [f"{t['case']} vs {t['against']}" for t in judged if t["passed"] is False]
    if failed:
        print(f"below target: {', '.join(failed)}", file=sys.stderr)
        return 1 if args.strict else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
