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
  when all rows would take more than ``QUIX_MAX_SECONDS`` per run;
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

import contextlib
import importlib
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

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

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

NAME = "influxdb1"
ROOT = BENCH_DIR.parent
MEASUREMENT = "bench"
TAGS = ("key",)
FIELDS = ("id", "value", "flag", "name")
TIME = "timestamp"
PRECISION = "ms"
BATCH_SIZE = 10_000
FIELD_TYPES = {"id": "integer", "value": "float", "flag": "boolean", "name": "string"}

QUIX_SPEC = "quixstreams[influxdb1]==3.28.1"
QUIX_MODULE = "quixstreams.sinks.community.influxdb1"
PIP_TIMEOUT_S = 600
QUIX_MAX_SECONDS = 60.0
QUIX_SAMPLE_ROWS = 100_000
QUIX_PROBE_ROWS = 20_000
IMPORT_TIMEOUT_S = 1800

CASE_NAMES = ("influxdb1-e2e", "influxdb1-e2e-gzip", "quix-influxdb1", "influx-import")

TARGETS: tuple[RelativeTarget, ...] = (
    ("influxdb1-e2e", "quix-influxdb1", 5.0),
    ("influxdb1-e2e", "influx-import", 0.5),
)


def log(line: str) -> None:
    print(line, flush=True)


def database_for(path: str) -> str:
    stem = "".join(c if c.isalnum() else "_" for c in Path(path).name.lower())
    return f"bench_{stem}"


@dataclass
class Influx:
    """The throwaway server and one database per run."""

    server: Any  # tests.services.influxdb.InfluxServer

    def fresh(self, path: str) -> None:
        database = database_for(path)
        self.server.drop_database(database)
        self.server.create_database(database)

    def cleanup(self, path: str) -> None:
        self.server.drop_database(database_for(path))

    def count_rows(self, path: str) -> int:
        database = database_for(path)
        types = self.server.field_types(database, MEASUREMENT)
        if types != FIELD_TYPES:
            raise RuntimeError(f"{database}: fields {types}, expected {FIELD_TYPES}")
        tags = [row["tagKey"] for row in self.server.query(database, "SHOW TAG KEYS")]
        if tags != list(TAGS):
            raise RuntimeError(f"{database}: tag keys {tags}, expected {list(TAGS)}")
        rows = self.server.query(database, f'SELECT count("id") FROM "{MEASUREMENT}"')
        return int(rows[0]["count"]) if rows else 0


def sink_writer(influx: Influx, *, gzip: bool = False) -> Callable[[DataFrame, str], None]:
    server = influx.server
    options = {
        "host": server.host,
        "port": str(server.influx_port),
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
            df.write.format("influxdb1")
            .mode("append")
            .options(**options)
            .option("database", database_for(path))
            .save()
        )

    return write


# --------------------------------------------------------------------------- influx -import


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
        command = [
            "influx",
            "-host",
            server.host,
            "-port",
            str(server.influx_port),
            "-import",
            "-path",
            str(self.file_for(path)),
            "-precision",
            PRECISION,
        ]
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=IMPORT_TIMEOUT_S, check=False
        )
        output = (done.stdout + done.stderr).strip()
        if done.returncode != 0 or "Failed 0 inserts" not in output:
            raise RuntimeError(f"influx -import failed (exit {done.returncode}): {output[-500:]}")

    def case(self) -> Case:
        return Case(
            "influx-import",
            self.write,
            "influx -import (influxdb-client) of the same points as a line-protocol file "
            "made beforehand: the server's own bulk loader, one process",
            count_rows=self.influx.count_rows,
            setup=self.setup,
            cleanup=self.cleanup,
        )


def influx_cli_version() -> str | None:
    try:
        done = subprocess.run(["influx", "-version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    text = done.stdout.strip()  # "InfluxDB shell version: 1.6.7~rc0"
    return ("influx " + text.rsplit(":", 1)[-1].strip()) if text else None


# --------------------------------------------------------------------------- Quix


@dataclass
class QuixFeed:
    """Quix Streams' InfluxDB1Sink and the rows it is fed (built outside the timing)."""

    sink_class: Any
    influx: Influx
    rows: list[dict[str, Any]] = field(default_factory=list)
    timestamps_ms: list[int] = field(default_factory=list)
    values: list[dict[str, Any]] = field(default_factory=list)

    def load(self, table: Any) -> None:
        import pyarrow as pa

        self.rows = table.drop_columns([TIME]).to_pylist()
        stamps = table.column(TIME).cast(pa.timestamp("ms", tz="UTC")).cast(pa.int64())
        self.timestamps_ms = stamps.to_pylist()

    def fresh_values(self, count: int) -> None:
        """New dicts for the next run: Quix's ``write`` pops the tag keys out of them."""
        self.values = [dict(row) for row in self.rows[:count]]

    def run(self, database: str, count: int) -> None:
        """Construct the sink, setup(), add() ``count`` rows, flush(): all timed."""
        server = self.influx.server
        sink = self.sink_class(
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
        try:
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
            "quix-influxdb1",
            write,
            f"Quix Streams InfluxDB1Sink(batch_size={BATCH_SIZE}): add() per row, one "
            "flush(), in one process" + ("" if count == all_rows else f" ({count:_} rows)"),
            count_rows=influx.count_rows,
            setup=setup,
            cleanup=influx.cleanup,
            rows=count,
        )


def _load_quix() -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with contextlib.suppress(ImportError):
            importlib.import_module("authlib.deprecate")
        warnings.simplefilter("ignore")
        return importlib.import_module(QUIX_MODULE).InfluxDB1Sink


def quix_rows_for(
    feed: QuixFeed, arrow: Any, rows: int, asked: int | None
) -> tuple[int, dict[str, Any]]:
    """All rows if Quix takes <= QUIX_MAX_SECONDS for them (a probe decides), else a sample."""
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
        feed.influx.cleanup(path)
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
Targets (issue), on the best times' rows/s, from one interleaved run:

{targets}
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


def parse_args(argv: list[str] | None) -> Any:
    parser = argument_parser(__doc__.splitlines()[0], rows=1_000_000)
    parser.add_argument("--quix-rows", type=int, default=None, help="rows to time Quix on")
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

    quix: Any = None
    if "quix-influxdb1" in wanted:
        quix, reason = import_or_install(
            QUIX_SPEC, _load_quix, install=not args.no_install, timeout_s=PIP_TIMEOUT_S, log=log
        )
        if reason:
            skipped["quix-influxdb1"] = reason
            log(f"skipping quix-influxdb1: {reason}")
    if "influx-import" in wanted and shutil.which("influx") is None:
        skipped["influx-import"] = "no `influx` CLI: run bash tests/services/install.sh"
        log(f"skipping influx-import: {skipped['influx-import']}")

    sys.path.insert(0, str(ROOT))
    from tests.services.influxdb import InfluxServer

    workdir = Path(tempfile.mkdtemp(prefix="quixsinks-bench-influx1-", dir=args.tmp))
    extra_info: dict[str, Any] = {}
    log("starting a throwaway InfluxDB 1.x ...")
    with InfluxServer() as server:
        influx = Influx(server)
        spark = bench_session("quixsinks-bench-influxdb1", args.cores, verbose=args.verbose)
        try:
            quixsinks.register(spark)
            register_floor(spark)
            log(f"building {args.rows:_} cached rows in {partitions} partitions ...")
            df = mixed_dataframe(spark, args.rows, partitions)
            cases = [
                floor_case(),
                Case(
                    "influxdb1-e2e",
                    sink_writer(influx),
                    f"influxdb1 sink into the server: batch_size={BATCH_SIZE}, no gzip (its "
                    "default)",
                    count_rows=influx.count_rows,
                    setup=influx.fresh,
                    cleanup=influx.cleanup,
                ),
                Case(
                    "influxdb1-e2e-gzip",
                    sink_writer(influx, gzip=True),
                    "the same with enable_gzip=true (informational)",
                    count_rows=influx.count_rows,
                    setup=influx.fresh,
                    cleanup=influx.cleanup,
                ),
            ]
            arrow = df.toArrow()  # once, outside every timed run
            if "influx-import" not in skipped:
                feed = ImportFeed(influx)
                feed.load(arrow)
                cases.append(feed.case())
            if quix is not None:
                quix_feed = QuixFeed(quix, influx)
                quix_rows, decision = quix_rows_for(quix_feed, arrow, args.rows, args.quix_rows)
                extra_info["quix"] = {
                    "quixstreams": importlib.import_module("quixstreams").__version__,
                    "rows": quix_rows,
                    **decision,
                }
                cases.append(quix_feed.case(quix_rows, args.rows))
            del arrow
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
                influxd=server_version(server),
                influx_cli=influx_cli_version(),
                points={
                    "measurement": MEASUREMENT,
                    "tags": list(TAGS),
                    "fields": FIELD_TYPES,
                    "time": TIME,
                    "precision": PRECISION,
                    "series": 1000,
                },
                batch_size=BATCH_SIZE,
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
        batch=BATCH_SIZE,
        quix_version=quix_info["quixstreams"] if quix_info else "(not run)",
        influx_cli=info.get("influx_cli") or "influx",
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
        title="quixsinks InfluxDB 1.x benchmark: writes vs Quix Streams and influx -import",
        info=info,
        results=results,
        floor=FLOOR,
        notes=notes,
        skipped=skipped,
        extra={"targets": judged, "all_targets_passed": verdict},
    )
    print()
    print(markdown)
    print(f"wrote {args.out / (NAME + '.json')} and {args.out / (NAME + '.md')}")
    failed = [f"{t['case']} vs {t['against']}" for t in judged if t["passed"] is False]
    if failed:
        print(f"below target: {', '.join(failed)}", file=sys.stderr)
        return 1 if args.strict else 0
    return 0


def server_version(server: Any) -> str | None:
    try:
        done = subprocess.run(
            [str(server.influxd), "version"], capture_output=True, text=True, timeout=30
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return (done.stdout or done.stderr).strip() or None


if __name__ == "__main__":
    sys.exit(main())
