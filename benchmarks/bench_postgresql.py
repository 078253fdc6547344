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
  dicts through ``add()`` and one ``flush()`` in this process (from the ``dev`` extra);
  timed on a sample when the full rows would take
  more than a minute;
* ``psql-copy``: ``psql -c "\\copy t FROM 'file' CSV"`` of a CSV file of the same rows,
  prepared once: the server's own limit;
* ``psql-staged``: the exactly-once design at its best, without Spark: one ``psql
  \\copy`` per core side by side, each of its share of the rows into a staging table of
  its own, then one transaction of INSERT ... SELECT from each and DROP: what a sink that
  keeps a micro-batch invisible until one commit transaction cannot beat.

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

import argparse
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness import MIXED_COLUMNS, Bench, Case, Destination, Page, log
from harness import run_name as table_for
from harness.quix import add_all

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

JDBC_JAR = Path("/usr/share/java/postgresql.jar")
JDBC_DRIVER = "org.postgresql.Driver"
JDBC_BATCHSIZE = 10_000
DATABASE = "quixsinks_bench"

#: The six columns, as the postgresql sink creates them from the DataFrame's schema.
TABLE_DDL = (
    "key text, id bigint, value double precision, flag boolean, name text, "
    '"timestamp" timestamp with time zone'
)


@dataclass
class Target(Destination):
    """The benchmark's PostgreSQL database and an autocommit admin connection."""

    server: Any
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

    def sink_case(self, name: str, write: Any, description: str) -> Case:
        """A case of the sink, which creates the run's table itself."""
        return self.case(name, write, description, setup=self.absent)

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


def sink_case(target: Target, write_mode: str, description: str) -> Case:
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
        writer = df.write.format("postgresql").mode("append").options(**options)
        writer.option("table_name", table_for(path)).save()

    return target.sink_case(f"sink-{write_mode}", write, description)


def jdbc_case(target: Target, name: str, description: str, *, rewrite: bool) -> Case:
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

    return target.case(name, write, description)


def psql_case(target: Target, arrow: Any, csv_path: Path) -> Case:
    """``psql \\copy`` of a CSV file of the rows, written once beforehand."""
    import pyarrow.csv as pa_csv

    if "'" in str(csv_path):
        raise ValueError(f"the CSV path must not contain a quote: {csv_path}")
    options = pa_csv.WriteOptions(include_header=False, quoting_style="needed")
    pa_csv.write_csv(arrow, str(csv_path), write_options=options)
    log(f"wrote {csv_path.stat().st_size / 1e6:.0f} MB of CSV for psql-copy")
    env = target.server.psql_env(target.dbname)

    def write(df: DataFrame, path: str) -> None:
        command = f"\\copy public.\"{table_for(path)}\" FROM '{csv_path}' CSV"
        subprocess.run(
            [target.psql, "-X", "-q", "-v", "ON_ERROR_STOP=1", "-c", command],
            env=env,
            check=True,
            capture_output=True,
            timeout=1800,
        )

    return target.case(
        "psql-copy",
        write,
        "psql \\copy FROM a prepared CSV file of the same rows (the server's limit)",
    )


def staged_case(target: Target, arrow: Any, folder: Path) -> Case:
    """The default write mode's design at its best, without Spark: one ``psql \\copy``
    per core side by side, each of its share of the rows (CSV files written beforehand)
    into a staging table of its own, then one transaction that copies every staging table
    into the table with INSERT ... SELECT and drops it. No sink keeping a micro-batch's
    rows invisible until its commit (one transaction, as PostgreSQL offers) beats this."""
    import pyarrow.csv as pa_csv

    parts = max(1, target.cores)
    options = pa_csv.WriteOptions(include_header=False, quoting_style="needed")
    files = []
    for part in range(parts):
        start, end = arrow.num_rows * part // parts, arrow.num_rows * (part + 1) // parts
        path = folder / f"rows-{part}.csv"
        if "'" in str(path):
            raise ValueError(f"the CSV path must not contain a quote: {path}")
        pa_csv.write_csv(arrow.slice(start, end - start), str(path), write_options=options)
        files.append(path)
    env = target.server.psql_env(target.dbname)
    psql = [target.psql, "-X", "-q", "-v", "ON_ERROR_STOP=1"]

    def write(df: DataFrame, path: str) -> None:
        table = table_for(path)
        stages = [f"{table}_stage{part}" for part in range(parts)]
        copies = [
            subprocess.Popen(
                [
                    *psql,
                    "-c",
                    f'CREATE TABLE public."{stage}" (LIKE public."{table}")',
                    "-c",
                    f"\\copy public.\"{stage}\" FROM '{file}' CSV",
                ],
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
            )
            for stage, file in zip(stages, files, strict=True)
        ]
        for copy in copies:
            _, err = copy.communicate(timeout=1800)
            if copy.returncode:
                raise RuntimeError(f"psql-staged: {err.decode(errors='replace')}")
        moves = " ".join(
            f'INSERT INTO public."{table}" SELECT * FROM public."{stage}"; '
            f'DROP TABLE public."{stage}";'
            for stage in stages
        )
        subprocess.run(
            [*psql, "-c", f"BEGIN; {moves} COMMIT;"],
            env=env,
            check=True,
            capture_output=True,
            timeout=1800,
        )

    return target.case(
        "psql-staged",
        write,
        f"psql: {parts} \\copy side by side into a staging table each, then one "
        "INSERT ... SELECT transaction (the exactly-once design's own limit)",
    )


@dataclass
class QuixFeed:
    """Quix Streams' PostgreSQLSink and the rows it is fed (built once, outside timing)."""

    sink_class: Any
    target: Target
    values: list[dict[str, Any]] = field(default_factory=list)
    keys: list[str] = field(default_factory=list)
    timestamps_ms: list[int] = field(default_factory=list)

    def load(self, table: Any) -> None:
        """The rows of ``table`` (pyarrow) as Quix record values and timestamps."""
        self.values = table.to_pylist()
        self.keys = [v["key"] for v in self.values]
        self.timestamps_ms = [int(v["timestamp"].timestamp() * 1000) for v in self.values]

    def write(self, df: DataFrame, path: str) -> None:
        """Construct the sink, connect, add() every loaded row, flush(): all timed."""
        server = self.target.server
        sink = self.sink_class(
            host=server.host,
            port=server.port,
            dbname=self.target.dbname,
            user=server.user,
            password=server.password,
            table_name=table_for(path),
            include_metadata=False,
        )
        sink.setup()
        try:
            add_all(sink, self.values, self.keys, self.timestamps_ms)
        finally:
            sink._client.close()  # the sink has no close(); its psycopg2 connection


def cases(bench: Bench) -> list[Case]:
    args, server = bench.args, bench.servers["postgres"]
    server.create_database(DATABASE, exist_ok=True)  # kept by the server of an earlier page
    target = Target(server, DATABASE, args.cores)
    bench.stack.callback(target.close)
    bench.info.update(
        postgresql=target.settings(),
        jdbc_batchsize=JDBC_BATCHSIZE,
        jdbc_jar=str(args.jdbc_jar) if session_conf(args) else None,
    )
    found = [
        sink_case(
            target,
            "exactly-once",
            "quixsinks postgresql sink, write_mode=exactly-once: COPY into a staging "
            "table per task, one INSERT ... SELECT transaction on the driver",
        ),
        sink_case(
            target,
            "prepared",
            "quixsinks postgresql sink, write_mode=prepared: COPY into the table in a "
            "prepared transaction per task, COMMIT PREPARED by the driver",
        ),
        sink_case(
            target,
            "direct",
            "quixsinks postgresql sink, write_mode=direct: COPY into the table per task",
        ),
    ]
    jdbc = f"Spark's JDBC writer, {JDBC_DRIVER}, batchsize={JDBC_BATCHSIZE}, "
    jdbc += f"numPartitions={args.cores}"
    if session_conf(args):
        found.append(jdbc_case(target, "spark-jdbc", jdbc, rewrite=False))
        rewrite = ", URL with reWriteBatchedInserts=true (tuned JDBC: multi-row INSERTs)"
        found.append(jdbc_case(target, "spark-jdbc-rewrite", jdbc + rewrite, rewrite=True))
    else:
        for name in ("spark-jdbc", "spark-jdbc-rewrite"):
            bench.skip(name, f"no JDBC driver at {args.jdbc_jar} (run: make services)")
    quix = bench.peer(
        ["quix-postgresql"], "quixstreams.sinks.community.postgresql", "PostgreSQLSink"
    )
    if quix is not None:
        feed = QuixFeed(quix, target)
        description = (
            "Quix Streams PostgreSQLSink(include_metadata=False): add() per row, "
            "one flush(), in one process"
        )
        found.append(
            bench.sampled(target.case("quix-postgresql", feed.write, description), feed.load)
        )
    if bench.wants("psql-copy"):
        found.append(psql_case(target, bench.arrow(), bench.workdir / "rows.csv"))
    if bench.wants("psql-staged"):
        found.append(staged_case(target, bench.arrow(), bench.workdir))
    return found


NOTES = """
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
(pyarrow, the same CSV dialect as the sink's COPY); `psql-staged` is {cores} such `\\copy`
side by side, each of its share of the rows into a staging table of its own, then one
transaction of `INSERT ... SELECT` from each and `DROP`: the exactly-once design's own
limit, without Spark. `vs floor` is rows/s over
`noop-arrow`'s (quixsinks' Arrow writer path with a do-nothing sink).
"""


def notes(bench: Bench) -> str:
    return NOTES.format(
        pg_version=bench.info["postgresql"]["version"].split(" on ")[0].replace("PostgreSQL ", ""),
        batchsize=JDBC_BATCHSIZE,
        cores=bench.args.cores,
        quix_version=bench.quix_version(),
        quix_sample=bench.quix_note(),
    )


def session_conf(args: argparse.Namespace | None) -> dict[str, str]:
    """The JDBC driver jar on ``spark.jars``, when it is installed (a running session
    cannot change it: the quick runner starts its shared session with it)."""
    jar = JDBC_JAR if args is None else args.jdbc_jar
    return {"spark.jars": str(jar)} if jar.is_file() else {}


def arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--jdbc-jar",
        type=Path,
        default=JDBC_JAR,
        help=f"PostgreSQL JDBC driver jar (default {JDBC_JAR})",
    )


PAGE = Page(
    name="postgresql",
    title="quixsinks PostgreSQL benchmark: postgresql sink vs Spark JDBC, Quix Streams "
    "and psql COPY",
    doc=__doc__ or "",
    cases=cases,
    case_names=(
        "sink-exactly-once",
        "sink-prepared",
        "sink-direct",
        "spark-jdbc",
        "spark-jdbc-rewrite",
        "quix-postgresql",
        "psql-copy",
        "psql-staged",
    ),
    targets=(
        ("sink-exactly-once", "spark-jdbc", 3.0),
        ("sink-exactly-once", "spark-jdbc-rewrite", 1.5),
        ("sink-direct", "psql-copy", 0.6),
        ("sink-exactly-once", "quix-postgresql", 10.0),
        # the exactly-once targets again, for the mode without the staging copy
        ("sink-prepared", "spark-jdbc", 3.0),
        ("sink-prepared", "spark-jdbc-rewrite", 1.5),
    ),
    notes=notes,
    servers=("postgres",),
    rows=1_000_000,
    session_conf=session_conf,
    arguments=arguments,
)

main = PAGE.main


if __name__ == "__main__":
    sys.exit(main())
