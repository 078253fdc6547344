"""PostgreSQL benchmark: the postgresql sink vs Spark JDBC, Quix Streams and psql COPY.

One local session and one throwaway PostgreSQL server on 127.0.0.1 (``PostgresServer``
from ``tests/services/postgres.py``: fsync off) take the same cached DataFrame
(``--rows`` rows, the foundation benchmark's six mixed columns) through:

* ``noop-arrow``: the quixsinks Arrow writer path with a do-nothing sink (the floor of
  every quixsinks sink, as in the foundation benchmark);
* ``sink-exactly-once``: quixsinks ``postgresql`` sink, ``write_mode=exactly-once``
  (COPY into a staging table on the executors, one ``INSERT ... SELECT`` on the driver);
* ``sink-prepared``: the same sink, ``write_mode=prepared`` (exactly-once by two-phase
  commit: COPY straight into the table in a prepared transaction per task, committed by
  the driver; the server runs with ``max_prepared_transactions=100``);
* ``sink-direct``: the same sink, ``write_mode=direct`` (COPY straight into the table);
* ``spark-jdbc``: Spark's own JDBC writer with ``org.postgresql.Driver``
  (``batchsize=10000``, ``numPartitions`` = cores), the jar on ``spark.jars``;
* ``spark-jdbc-rewrite``: the same with ``reWriteBatchedInserts=true`` on the JDBC URL
  (tuned JDBC);
* ``quix-postgresql``: Quix Streams' ``PostgreSQLSink``, fed the same rows as Python
  dicts through ``add()`` and one ``flush()`` in this process (installed with pip into
  this environment on first use); timed on a sample when the full rows would take
  more than a minute;
* ``psql-copy``: ``psql -c "\\copy t FROM 'file' CSV"`` of a CSV file of the same rows,
  prepared once: the server's own limit.

Every run writes into a fresh, empty table with the same six columns (the sink creates
its own, with ``include_metadata=false``, ``key_column=none``, ``timestamp_column=none``);
the table is dropped after the run. Row counts (and the six columns) are checked after
each case's warm-up run.

Targets (issue 10): ``sink-exactly-once`` >= 3x ``spark-jdbc``'s rows/s, >= 1.5x
``spark-jdbc-rewrite``'s and >= 10x ``quix-postgresql``'s; ``sink-direct`` >= 0.6x
``psql-copy``'s. Every case is warmed up once, then the rounds interleave the cases.

Run: ``.venv/bin/python benchmarks/bench_postgresql.py [--rows N]``.
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
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from common import (
    BENCH_DIR,
    FLOOR,
    MIXED_COLUMNS,
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

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

NAME = "postgresql"
ROOT = BENCH_DIR.parent
JDBC_JAR = Path("/usr/share/java/postgresql.jar")
JDBC_DRIVER = "org.postgresql.Driver"
JDBC_BATCHSIZE = 10_000
QUIX_SPEC = "quixstreams[postgresql]"
QUIX_MODULE = "quixstreams.sinks.community.postgresql"
PIP_TIMEOUT_S = 600
#: Quix's sink is timed on all rows only if that takes at most this long (per run) ...
QUIX_MAX_SECONDS = 60.0
#: ... else on this many rows
QUIX_SAMPLE_ROWS = 100_000
#: rows of the probe that decides between the two
QUIX_PROBE_ROWS = 20_000
DATABASE = "quixsinks_bench"

#: The six columns, as the postgresql sink creates them from the DataFrame's schema.
TABLE_DDL = (
    "key text, id bigint, value double precision, flag boolean, name text, "
    '"timestamp" timestamp with time zone'
)

CASE_NAMES = (
    "sink-exactly-once",
    "sink-prepared",
    "sink-direct",
    "spark-jdbc",
    "spark-jdbc-rewrite",
    "quix-postgresql",
    "psql-copy",
)

#: (case, against, minimum ratio of rows/s)
TARGETS: tuple[RelativeTarget, ...] = (
    ("sink-exactly-once", "spark-jdbc", 3.0),
    ("sink-exactly-once", "spark-jdbc-rewrite", 1.5),
    ("sink-direct", "psql-copy", 0.6),
    ("sink-exactly-once", "quix-postgresql", 10.0),
    # the exactly-once targets again, for the mode without the staging copy
    ("sink-prepared", "spark-jdbc", 3.0),
    ("sink-prepared", "spark-jdbc-rewrite", 1.5),
)


def log(line: str) -> None:
    print(line, flush=True)


def table_for(path: str) -> str:
    """The table of one run: named after the harness's fresh path (``<case>-<run>``)."""
    stem = "".join(c if c.isalnum() else "_" for c in Path(path).name.lower())
    return f"bench_{stem}"


# --------------------------------------------------------------------------- the server


@dataclass
class Target:
    """The benchmark's PostgreSQL database and an autocommit admin connection."""

    server: Any  # tests.services.postgres.PostgresServer
    dbname: str
    cores: int
    conn: Any = None
    psql: str = "psql"

    def __post_init__(self) -> None:
        self.conn = self.server.connect(self.dbname)
        self.conn.autocommit = True
        psql = self.server.pg_bin / "psql"
        self.psql = str(psql) if psql.exists() else "psql"

    def execute(self, statement: str, params: Sequence[Any] | None = None) -> list[Any]:
        with self.conn.cursor() as cur:
            cur.execute(statement, params)
            return list(cur.fetchall()) if cur.description else []

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None

    # table lifecycle (outside the timing)

    def drop(self, table: str) -> None:
        # the sink drops its own staging tables in every commit
        self.execute(f'DROP TABLE IF EXISTS public."{table}"')

    def fresh(self, path: str) -> None:
        """Drop and create the run's table with the six columns; checkpoint."""
        table = table_for(path)
        self.drop(table)
        self.execute(f'CREATE TABLE public."{table}" ({TABLE_DDL})')
        self.execute("CHECKPOINT")

    def absent(self, path: str) -> None:
        """For the sink: the run's table must not exist (the sink creates it); checkpoint."""
        self.drop(table_for(path))
        self.execute("CHECKPOINT")

    def cleanup(self, path: str) -> None:
        self.drop(table_for(path))

    def count_rows(self, path: str) -> int:
        """Rows in the run's table, after checking that it has exactly the six columns."""
        table = table_for(path)
        columns = [
            name
            for (name,) in self.execute(
                "SELECT column_name FROM information_schema.columns "
                "WHERE table_schema = 'public' AND table_name = %s ORDER BY ordinal_position",
                (table,),
            )
        ]
        if sorted(columns) != sorted(MIXED_COLUMNS):
            raise RuntimeError(f"table {table} has columns {columns}, expected {MIXED_COLUMNS}")
        return int(self.execute(f'SELECT count(*) FROM public."{table}"')[0][0])

    def settings(self) -> dict[str, Any]:
        names = (
            "fsync",
            "synchronous_commit",
            "full_page_writes",
            "shared_buffers",
            "work_mem",
            "maintenance_work_mem",
            "max_wal_size",
            "autovacuum",
        )
        info: dict[str, Any] = {"version": self.execute("SELECT version()")[0][0]}
        for name in names:
            info[name] = self.execute(f"SHOW {name}")[0][0]
        return info


# --------------------------------------------------------------------------- cases


def sink_writer(target: Target, write_mode: str) -> Callable[[DataFrame, str], None]:
    server = target.server
    options = {
        "host": server.host,
        "port": str(server.port),
        "user": server.user,
        "password": server.password,
        "dbname": target.dbname,
        "write_mode": write_mode,
        "include_metadata": "false",
        "key_column": "none",
        "timestamp_column": "none",
    }

    def write(df: DataFrame, path: str) -> None:
        (
            df.write.format("postgresql")
            .mode("append")
            .options(**options)
            .option("table_name", table_for(path))
            .save()
        )

    return write


def jdbc_writer(target: Target, *, rewrite: bool = False) -> Callable[[DataFrame, str], None]:
    """Spark's JDBC writer; ``rewrite``: with the driver's ``reWriteBatchedInserts=true``."""
    server = target.server
    url = server.jdbc_url(target.dbname) + ("?reWriteBatchedInserts=true" if rewrite else "")

    def write(df: DataFrame, path: str) -> None:
        (
            df.write.format("jdbc")
            .mode("append")
            .option("url", url)
            .option("driver", JDBC_DRIVER)
            .option("user", server.user)
            .option("password", server.password)
            .option("dbtable", f'public."{table_for(path)}"')
            .option("batchsize", str(JDBC_BATCHSIZE))
            .option("numPartitions", str(target.cores))
            .save()
        )

    return write


def psql_writer(target: Target, csv_path: Path) -> Callable[[DataFrame, str], None]:
    if "'" in str(csv_path):
        raise ValueError(f"the CSV path must not contain a quote: {csv_path}")
    env = target.server.psql_env(target.dbname)

    def write(df: DataFrame, path: str) -> None:
        command = f"\\copy public.\"{table_for(path)}\" FROM '{csv_path}' CSV"
        subprocess.run(
            [target.psql, "-X", "-q", "-v", "ON_ERROR_STOP=1", "-c", command],
            env=env,
            check=True,
            capture_output=True,
        )

    return write


@dataclass
class QuixFeed:
    """Quix Streams' PostgreSQLSink and the rows it is fed (built once, outside timing)."""

    sink_class: Any
    target: Target
    values: list[dict[str, Any]] = field(default_factory=list)
    timestamps_ms: list[int] = field(default_factory=list)

    def load(self, table: Any) -> None:
        """The rows of ``table`` (pyarrow) as Quix record values and timestamps."""
        self.values = table.to_pylist()
        self.timestamps_ms = [int(v["timestamp"].timestamp() * 1000) for v in self.values]

    def run(self, table_name: str, rows: int) -> None:
        """Construct the sink, connect, add() the first ``rows`` rows, flush(): all timed."""
        server = self.target.server
        sink = self.sink_class(
            host=server.host,
            port=server.port,
            dbname=self.target.dbname,
            user=server.user,
            password=server.password,
            table_name=table_name,
            include_metadata=False,
        )
        sink.setup()
        try:
            add = sink.add
            values = self.values
            stamps = self.timestamps_ms
            for offset in range(rows):
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
            sink._client.close()  # the sink has no close(); its psycopg2 connection

    def writer(self, rows: int) -> Callable[[DataFrame, str], None]:
        def write(df: DataFrame, path: str) -> None:
            self.run(table_for(path), rows)

        return write


def _import_quix() -> Any:
    with warnings.catch_warnings():  # its dependencies' deprecation warnings
        warnings.simplefilter("ignore")
        with contextlib.suppress(ImportError):  # it adds an "always" filter when imported
            importlib.import_module("authlib.deprecate")
        warnings.simplefilter("ignore")
        return importlib.import_module(QUIX_MODULE).PostgreSQLSink


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
    path = "quix-probe"
    feed.target.fresh(path)
    started = time.perf_counter()
    try:
        feed.run(table_for(path), probe)
    finally:
        seconds = time.perf_counter() - started
        feed.target.cleanup(path)
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


# --------------------------------------------------------------------------- targets


NOTES = """
Targets (issue), on the best times' rows/s:

{targets}
Every run writes into a fresh, empty table of the same six columns (`key` text, `id`
bigint, `value` double precision, `flag` boolean, `name` text, `timestamp` timestamptz),
dropped after the run; the server is a throwaway local PostgreSQL {pg_version} with
fsync, synchronous_commit and full_page_writes off (not durable: it measures CPU and
protocol cost, not the disk). `sink-*` use `include_metadata=false`, `key_column=none`,
`timestamp_column=none` (the sink creates the table itself; a new table per run).
`spark-jdbc` is `df.write.format("jdbc")` with `org.postgresql.Driver`,
`batchsize={batchsize}`, `numPartitions={cores}` (batched prepared INSERTs, the
targets' baseline); `spark-jdbc-rewrite` is the same with `reWriteBatchedInserts=true`
on the JDBC URL (the driver sends multi-row INSERTs; tuned JDBC, the 1.5x target).
`quix-postgresql` is Quix Streams {quix_version}
`PostgreSQLSink(include_metadata=False)`: its construction, connect, one `add()` per
row (value = the row's six columns as a dict) and one `flush()` in the driver process,
the rows read from the cached DataFrame beforehand{quix_sample}. `psql-copy` is
`psql -c "\\copy t FROM 'file' CSV"` of a CSV file of all rows written beforehand
(pyarrow, the same CSV dialect as the sink's COPY). `vs floor` is rows/s over
`noop-arrow`'s (quixsinks' Arrow writer path with a do-nothing sink).
"""


# --------------------------------------------------------------------------- main


def session_conf(jdbc_jar: Path = JDBC_JAR) -> dict[str, str]:
    """The settings this benchmark's session needs that a running session cannot change
    (``benchmarks/quick.py`` starts its shared session with them): the JDBC driver jar on
    ``spark.jars``, when it is installed."""
    return {"spark.jars": str(jdbc_jar)} if jdbc_jar.is_file() else {}


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
    parser.add_argument(
        "--jdbc-jar",
        type=Path,
        default=JDBC_JAR,
        help=f"PostgreSQL JDBC driver jar (default {JDBC_JAR})",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    partitions = args.partitions or args.cores
    wanted = selected_cases(args.cases, CASE_NAMES)
    skipped: dict[str, str] = {}

    # quixstreams first: a pip install must not run while Spark and the server are up
    quix_class = None
    if "quix-postgresql" in wanted:
        quix_class, reason = import_or_install(
            QUIX_SPEC, _import_quix, install=not args.no_install, timeout_s=PIP_TIMEOUT_S, log=log
        )
        if reason:
            skipped["quix-postgresql"] = reason
            log(f"skipping quix-postgresql: {reason}")
    conf = session_conf(args.jdbc_jar)
    if not conf:
        for name in ("spark-jdbc", "spark-jdbc-rewrite"):
            if name in wanted:
                skipped[name] = (
                    f"no JDBC driver at {args.jdbc_jar} (run: bash tests/services/install.sh)"
                )
                log(f"skipping {name}: {skipped[name]}")

    sys.path.insert(0, str(ROOT))
    import quixsinks
    from tests.services.postgres import PostgresServer

    workdir = Path(tempfile.mkdtemp(prefix="quixsinks-bench-pg-", dir=args.tmp))
    csv_path = workdir / "rows.csv"
    extra_info: dict[str, Any] = {}
    log("starting a throwaway PostgreSQL server ...")
    with PostgresServer(synchronous_commit=False) as server:
        server.create_database(DATABASE)
        target = Target(server, DATABASE, args.cores)
        spark = bench_session(
            "quixsinks-bench-postgresql", args.cores, verbose=args.verbose, **conf
        )
        try:
            quixsinks.register(spark)
            register_floor(spark)
            log(f"building {args.rows:_} cached rows in {partitions} partitions ...")
            df = mixed_dataframe(spark, args.rows, partitions)

            arrow = df.toArrow()  # once, outside every timed run
            if "psql-copy" in wanted:
                import pyarrow.csv as pa_csv

                pa_csv.write_csv(
                    arrow,
                    str(csv_path),
                    write_options=pa_csv.WriteOptions(include_header=False, quoting_style="needed"),
                )
                log(f"wrote {csv_path.stat().st_size / 1e6:.0f} MB of CSV for psql-copy")

            cases = [
                floor_case(),
                Case(
                    "sink-exactly-once",
                    sink_writer(target, "exactly-once"),
                    "quixsinks postgresql sink, write_mode=exactly-once: COPY into a staging "
                    "table per task, one INSERT ... SELECT transaction on the driver",
                    count_rows=target.count_rows,
                    setup=target.absent,
                    cleanup=target.cleanup,
                ),
                Case(
                    "sink-prepared",
                    sink_writer(target, "prepared"),
                    "quixsinks postgresql sink, write_mode=prepared: COPY into the table in a "
                    "prepared transaction per task, COMMIT PREPARED by the driver",
                    count_rows=target.count_rows,
                    setup=target.absent,
                    cleanup=target.cleanup,
                ),
                Case(
                    "sink-direct",
                    sink_writer(target, "direct"),
                    "quixsinks postgresql sink, write_mode=direct: COPY into the table per task",
                    count_rows=target.count_rows,
                    setup=target.absent,
                    cleanup=target.cleanup,
                ),
            ]
            if "spark.jars" in conf:
                jdbc = f"{JDBC_DRIVER}, batchsize={JDBC_BATCHSIZE}, numPartitions={args.cores}"
                for name, rewrite, text in (
                    ("spark-jdbc", False, f"Spark's JDBC writer, {jdbc}"),
                    (
                        "spark-jdbc-rewrite",
                        True,
                        f"Spark's JDBC writer, {jdbc}, URL with reWriteBatchedInserts=true "
                        "(tuned JDBC: the driver's multi-row INSERT rewrite)",
                    ),
                ):
                    cases.append(
                        Case(
                            name,
                            jdbc_writer(target, rewrite=rewrite),
                            text,
                            count_rows=target.count_rows,
                            setup=target.fresh,
                            cleanup=target.cleanup,
                        )
                    )
            if quix_class is not None:
                feed = QuixFeed(quix_class, target)
                quix_rows, decision = quix_rows_for(feed, arrow, args.rows, args.quix_rows)
                extra_info["quix"] = {
                    "quixstreams": importlib.import_module("quixstreams").__version__,
                    "rows": quix_rows,
                    **decision,
                }
                cases.append(
                    Case(
                        "quix-postgresql",
                        feed.writer(quix_rows),
                        "Quix Streams PostgreSQLSink(include_metadata=False): add() per row, "
                        "one flush(), in one process"
                        + ("" if quix_rows == args.rows else f" ({quix_rows:_} rows)"),
                        count_rows=target.count_rows,
                        setup=target.fresh,
                        cleanup=target.cleanup,
                        rows=quix_rows,
                    )
                )
            del arrow
            cases.append(
                Case(
                    "psql-copy",
                    psql_writer(target, csv_path),
                    "psql \\copy FROM a prepared CSV file of the same rows (the server's limit)",
                    count_rows=target.count_rows,
                    setup=target.fresh,
                    cleanup=target.cleanup,
                )
            )
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
                postgresql=target.settings(),
                jdbc_jar=str(args.jdbc_jar) if "spark.jars" in conf else None,
                jdbc_batchsize=JDBC_BATCHSIZE,
                **extra_info,
            )
            df.unpersist()
        finally:
            close_session(spark)
            target.close()
            shutil.rmtree(workdir, ignore_errors=True)
    log("PostgreSQL server stopped")

    judged, verdict = judge_targets(results, TARGETS, skipped)
    quix = info.get("quix")
    notes = NOTES.format(
        targets=targets_markdown(judged),
        pg_version=info["postgresql"]["version"].split(" on ")[0].replace("PostgreSQL ", ""),
        batchsize=JDBC_BATCHSIZE,
        cores=args.cores,
        quix_version=quix["quixstreams"] if quix else "(not run)",
        quix_sample=(
            f"; timed on the first {quix['rows']:,} rows (all {args.rows:,} would take "
            f"~{quix.get('estimated_seconds_for_all_rows', '?')} s per run), its rows/s "
            "compared as is"
            if quix and quix["rows"] != args.rows
            else ""
        ),
    )
    markdown = write_results(
        args.out,
        NAME,
        title="quixsinks PostgreSQL benchmark: postgresql sink vs Spark JDBC, Quix Streams "
        "and psql COPY",
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


if __name__ == "__main__":
    sys.exit(main())
