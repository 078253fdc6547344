"""Micro-batch latency: what one small streaming micro-batch costs per sink, over the floor.

One local session, the throwaway servers of the other pages (PostgreSQL, Redis, InfluxDB
behind its 3.x front, Mosquitto) and, per case, a streaming query with its own fresh
checkpoint and destination:

* input: Spark's ``rate-micro-batch`` source, ``rowsPerBatch=100``, one partition: every
  micro-batch has exactly 100 rows, whatever the trigger's timing (the ``rate`` source
  gives rows per second instead, so a batch's size would follow the batch's duration),
  and a new batch is always available, so the default trigger runs batches back to back.
  Its ``value`` becomes the six mixed columns of the other pages (``key``, ``id``,
  ``value``, ``flag``, ``name``, ``timestamp`` one second apart);
* ``noop-arrow``: the floor, the harness's do-nothing ``BatchingSink``: the quixsinks
  Python writer path writing nothing;
* ``spark-noop``: Spark's JVM ``noop`` sink (informational: the cost of the Python data
  source itself);
* the sinks ``file`` (parquet), ``csvfile``, ``postgresql``, ``redis``, ``influxdb3``,
  ``iceberg`` (a local SQL catalog on a warehouse folder), ``tsdatalake``, ``influxdb1``
  and ``mqtt``, with the option sets of their own pages.

Per case, ``--warmup`` micro-batches are dropped, then ``--batches`` are read from a
StreamingQueryListener (``durationMs``: ``triggerExecution``, the whole micro-batch, and
``addBatch``, the write); p50 and p95 of each. ``--runs`` rounds run every case once in
turn (a, b, c, a, b, c), after one untimed run of the floor (the session's warm-up);
the median of the rounds' p50s counts, and the overhead over the
floor is taken per round (the case's p50 minus the floor's p50 of the same round).

Flat with history: per sink (and the floor) one longer query of ``--history-batches``
micro-batches; the median ``triggerExecution`` of the first and of the last 100 batches
and their ratio ("flat" when last/first <= 1.25), plotted per batch.

Iceberg's ceiling: the ``iceberg`` case's commit against pyiceberg's own commit of one
prebuilt data file, both in this process without Spark (:func:`iceberg_commit_ceiling`).

Targets (issue #31): p50 overhead over the floor <= 10 ms per micro-batch per sink;
history flat per sink.

Run: ``.venv/bin/python benchmarks/bench_latency.py [--batches N] [--quick]``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness import Bench, Page, log, machine_info, write_measured
from harness import servers as bench_servers
from harness.session import NOOP_FORMAT, bench_session, close_session, register_sinks

from quixsinks.spark.timings import TIMINGS_ENV

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming.readwriter import DataStreamWriter

TITLE = "quixsinks micro-batch latency: 100-row micro-batches per sink, over the floor"
FLOOR = "noop-arrow"
ROWS_PER_BATCH = 100
SINKS = (
    "file",
    "csvfile",
    "postgresql",
    "redis",
    "influxdb3",
    "iceberg",
    "tsdatalake",
    "influxdb1",
    "mqtt",
)
#: iceberg with snapshot expiry: its history run shows what keeps the commit flat
ICEBERG_KEEP = "iceberg-keep100"
CASES = (FLOOR, "spark-noop", *SINKS, ICEBERG_KEEP)
#: "flat": the median of the last batches at most this times the first batches'
FLAT_RATIO = 1.25
#: p50 overhead over the floor, per micro-batch (issue #31)
MAX_OVERHEAD_MS = 10.0
#: batches compared at each end of the history run (fewer when the run is short)
HISTORY_WINDOW = 100
#: one micro-batch may take this long before the run is called stuck
BATCH_TIMEOUT_S = 60.0
#: defaults sized for 2 cores, where one micro-batch takes 0.15-0.5 s: the rounds take
#: about 5 minutes, the history runs of 1,000 batches (issue #31) about 35 to 90
BATCHES, WARMUP, HISTORY_BATCHES = 25, 5, 1000
QUICK = {"batches": 3, "warmup": 1, "repeat": 1, "history_batches": 4}
SERVERS = ("postgres", "redis", "influxdb", "mosquitto")
ICEBERG_TABLE = "bench.events"
INFLUX = {
    "measurement": "bench",
    "tags_keys": "key",
    "fields_keys": "id,value,flag,name",
    "time_key": "timestamp",
    "time_precision": "ms",
    "batch_size": "10000",
}
VALUES = "id,value,flag,name"


# --------------------------------------------------------------------------- the input


def stream(spark: SparkSession) -> DataFrame:
    """100 rows per micro-batch, mapped to the six mixed columns of the other pages."""
    from pyspark.sql import functions as F

    raw = (
        spark.readStream.format("rate-micro-batch")
        .option("rowsPerBatch", ROWS_PER_BATCH)
        .option("numPartitions", 1)
        .load()
    )
    return raw.select(
        F.concat(F.lit("k"), (F.col("value") % 1000).cast("string")).alias("key"),
        F.col("value").alias("id"),
        (F.col("value").cast("double") / F.lit(7.0)).alias("value"),
        (F.col("value") % 2 == 0).alias("flag"),
        F.substring(F.md5(F.col("value").cast("string")), 1, 12).alias("name"),
        F.timestamp_seconds(F.lit(1_700_000_000) + F.col("value")).alias("timestamp"),
    )


# --------------------------------------------------------------------------- the cases


@dataclass
class Sink:
    """One case: ``writer(stream, run)`` configures a DataStreamWriter for a fresh
    destination named after ``run`` (a folder under the run's directory, a table, a
    database, a topic root); ``setup``/``cleanup`` run around it, outside the timing."""

    name: str
    description: str
    options: Callable[[Path], dict[str, str]]
    format: str
    setup: Callable[[Path], None] | None = None
    cleanup: Callable[[Path], None] | None = None
    #: runs only the history run (a variant of a sink, for its history alone)
    history_only: bool = False


def run_name(run: Path) -> str:
    return "lat_" + "".join(c if c.isalnum() else "_" for c in run.name.lower())


def sinks(bench: Bench) -> list[Sink]:
    """Every case that can run here (the others are reported skipped, with the reason)."""
    found = [
        Sink(FLOOR, "do-nothing BatchingSink: the quixsinks Python writer path", _no, NOOP_FORMAT),
        Sink("spark-noop", "Spark's JVM noop sink (no Python)", _no, "noop"),
        Sink(
            "file",
            "file sink, format=parquet",
            lambda run: {"path": str(run / "out"), "format": "parquet"},
            "file",
        ),
        Sink("csvfile", "csvfile sink", lambda run: {"path": str(run / "out.csv")}, "csvfile"),
        Sink(
            "iceberg",
            f"iceberg sink, local SQL catalog on a warehouse folder, table {ICEBERG_TABLE}",
            lambda run: {"warehouse": str(run / "warehouse"), "table_name": ICEBERG_TABLE},
            "iceberg",
        ),
        Sink(
            ICEBERG_KEEP,
            "iceberg sink as above with keep_snapshots=100 (history run only)",
            lambda run: {
                "warehouse": str(run / "warehouse"),
                "table_name": ICEBERG_TABLE,
                "keep_snapshots": "100",
            },
            "iceberg",
            history_only=True,
        ),
        Sink(
            "tsdatalake",
            "tsdatalake sink, hive_columns=year,month,day,hour from timestamp",
            lambda run: {
                "path": str(run / "lake"),
                "table_name": "readings",
                "hive_columns": "year,month,day,hour",
                "timestamp_column": "timestamp",
            },
            "tsdatalake",
        ),
    ]
    running = bench.servers
    if "postgres" in running:
        found.append(postgres_sink(running["postgres"], bench))
    if "redis" in running:
        found.append(redis_sink(running["redis"], bench))
    if "influxdb" in running:
        found += influx_sinks(running["influxdb"])
    if "mosquitto" in running:
        found.append(mqtt_sink(running["mosquitto"]))
    return [s for s in found if s.name in bench.wanted]


def _no(run: Path) -> dict[str, str]:
    return {}


def postgres_sink(server: Any, bench: Bench) -> Sink:
    conn = server.connect()
    conn.autocommit = True
    bench.stack.callback(conn.close)

    def drop(run: Path) -> None:
        with conn.cursor() as cur:
            cur.execute(f'DROP TABLE IF EXISTS public."{run_name(run)}"')

    base = {
        "host": server.host,
        "port": str(server.port),
        "user": server.user,
        "password": server.password,
        "dbname": server.dbname,
        "include_metadata": "false",
        "key_column": "none",
        "timestamp_column": "none",
    }
    return Sink(
        "postgresql",
        "postgresql sink, write_mode=exactly-once (its default), a fresh table per run",
        lambda run: {**base, "table_name": run_name(run)},
        "postgresql",
        setup=drop,
        cleanup=drop,
    )


def redis_sink(server: Any, bench: Bench) -> Sink:
    client = server.client()
    bench.stack.callback(client.close)

    def flush(run: Path) -> None:
        client.flushall()

    return Sink(
        "redis",
        "redis sink, data_type=string (MSET of JSON values), pipeline_size=1000",
        lambda run: {
            **server.options,
            "data_type": "string",
            "key_template": run_name(run) + ":{id}",
            "value_columns": VALUES,
            "pipeline_size": "1000",
        },
        "redis",
        setup=flush,
        cleanup=flush,
    )


def influx_sinks(server: Any) -> list[Sink]:
    def fresh(run: Path) -> None:
        server.drop_database(run_name(run))
        server.create_database(run_name(run))

    def drop(run: Path) -> None:
        server.drop_database(run_name(run))

    return [
        Sink(
            "influxdb3",
            "influxdb3 sink (gzip) into influxd 1.x behind the test suite's InfluxDB 3 front",
            lambda run: {
                **INFLUX,
                "host": server.url,
                "token": server.token,
                "enable_gzip": "true",
                "database": run_name(run),
            },
            "influxdb3",
            setup=fresh,
            cleanup=drop,
        ),
        Sink(
            "influxdb1",
            "influxdb1 sink (no gzip) into influxd 1.x",
            lambda run: {
                **INFLUX,
                "host": server.host,
                "port": str(server.influx_port),
                "enable_gzip": "false",
                "database": run_name(run),
            },
            "influxdb1",
            setup=fresh,
            cleanup=drop,
        ),
    ]


def mqtt_sink(broker: Any) -> Sink:
    return Sink(
        "mqtt",
        "mqtt sink, MQTT 3.1.1, QoS 1, a fresh topic root per run",
        lambda run: {
            **broker.options(),
            "client_id": "bench-latency-" + uuid.uuid4().hex[:8],
            "topic_root": "latency/" + run_name(run),
            "version": "3.1.1",
            "value_columns": VALUES,
            "timestamp_column": "none",
        },
        "mqtt",
    )


# --------------------------------------------------------------------------- one streaming run


class Progress:
    """A StreamingQueryListener's record of ``durationMs`` per micro-batch, per query; an
    Event per query fires once it has seen the batches asked for."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.batches: dict[str, list[dict[str, int]]] = {}
        self.wanted: dict[str, tuple[int, threading.Event]] = {}

    def expect(self, query_id: str, count: int) -> threading.Event:
        done = threading.Event()
        with self.lock:
            self.wanted[query_id] = (count, done)
            if len(self.batches.get(query_id, ())) >= count:
                done.set()
        return done

    def record(self, query_id: str, batch_id: int, durations: dict[str, int]) -> None:
        with self.lock:
            seen = self.batches.setdefault(query_id, [])
            seen.append({"batch": batch_id, **durations})
            count, done = self.wanted.get(query_id, (0, None))
            if done is not None and len(seen) >= count:
                done.set()

    def take(self, query_id: str) -> list[dict[str, int]]:
        with self.lock:
            self.wanted.pop(query_id, None)
            return sorted(self.batches.pop(query_id, []), key=lambda b: b["batch"])


@contextlib.contextmanager
def listening(spark: SparkSession) -> Iterator[Progress]:
    from pyspark.sql.streaming.listener import StreamingQueryListener

    progress = Progress()

    class Listener(StreamingQueryListener):
        def onQueryStarted(self, event: Any) -> None:
            pass

        def onQueryProgress(self, event: Any) -> None:
            p = event.progress
            if p.numInputRows:  # a batch without rows did no write (none here)
                durations = {k: int(v) for k, v in (p.durationMs or {}).items()}
                progress.record(str(p.id), int(p.batchId), durations)

        def onQueryIdle(self, event: Any) -> None:
            pass

        def onQueryTerminated(self, event: Any) -> None:
            pass

    listener = Listener()
    spark.streams.addListener(listener)
    try:
        yield progress
    finally:
        spark.streams.removeListener(listener)


def run_query(
    spark: SparkSession, progress: Progress, sink: Sink, run: Path, batches: int
) -> list[dict[str, int]]:
    """``batches`` micro-batches of ``sink`` into a fresh destination (``run``), timed by
    Spark; every batch's ``durationMs``."""
    run.mkdir(parents=True)
    if sink.setup is not None:
        sink.setup(run)
    writer: DataStreamWriter = (
        stream(spark)
        .writeStream.format(sink.format)
        .options(**sink.options(run))
        .option("checkpointLocation", str(run / "checkpoint"))
        .queryName(run_name(run))
    )
    query = writer.start()
    try:
        done = progress.expect(str(query.id), batches)
        deadline = time.monotonic() + BATCH_TIMEOUT_S * batches
        while not done.wait(1.0):
            if query.exception() is not None or not query.isActive:
                raise RuntimeError(f"{sink.name}: the query ended: {query.exception()}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"{sink.name}: {batches} micro-batches took too long")
    finally:
        query.stop()
        try:
            if sink.cleanup is not None:
                sink.cleanup(run)
        finally:
            shutil.rmtree(run, ignore_errors=True)
    return progress.take(str(query.id))[:batches]


# --------------------------------------------------------------------------- statistics


def percentile(values: list[float], q: float) -> float:
    """The ``q`` quantile (0.01 .. 0.99), linear between the closest ranks."""
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[round(q * 100) - 1]


#: Spark's phases of a micro-batch (``durationMs``), in the order they run; ``other`` is
#: the rest of ``triggerExecution`` (listeners, metrics, the trigger's own bookkeeping)
PHASES = ("latestOffset", "getBatch", "queryPlanning", "addBatch", "walCommit", "commitOffsets")


def summary(batches: list[dict[str, int]]) -> dict[str, Any]:
    total = [float(b.get("triggerExecution", 0)) for b in batches]
    add = [float(b.get("addBatch", 0)) for b in batches]
    phases = {name: percentile([float(b.get(name, 0)) for b in batches], 0.5) for name in PHASES}
    other = [b.get("triggerExecution", 0) - sum(b.get(n, 0) for n in PHASES) for b in batches]
    phases["other"] = percentile([float(v) for v in other], 0.5)
    return {
        "p50_ms": percentile(total, 0.5),
        "p95_ms": percentile(total, 0.95),
        "add_batch_p50_ms": percentile(add, 0.5),
        "add_batch_p95_ms": percentile(add, 0.95),
        "phases_p50_ms": phases,
    }


#: quixsinks' calls per micro-batch (``quixsinks.spark.timings``): the driver plans a stream
#: writer twice (for the tasks, and again in the process that commits), one task writes
#: (its time includes the wait for Spark's rows), the driver commits
CALLS = ("plan", "write", "commit")


@dataclass
class OwnTimings:
    """quixsinks' own time per micro-batch, read from the ``QUIXSINKS_TIMINGS_FILE`` lines
    its Python workers append (the variable is set before this page starts Spark)."""

    path: Path

    @classmethod
    def from_env(cls) -> OwnTimings | None:
        value = os.environ.get(TIMINGS_ENV)
        return cls(Path(value)) if value else None

    def per_batch(self, start: float, end: float) -> dict[str, float] | None:
        """Per call the median wall and CPU ms times its calls per micro-batch, over the
        calls that started between ``start`` and ``end`` (warm-up batches included: the
        medians shrug them off); None without lines (a session started before the
        variable was set)."""
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            return None
        lines = [json.loads(line) for line in text.splitlines() if line.strip()]
        lines = [line for line in lines if start <= line["at"] <= end]
        commits = sum(1 for line in lines if line["call"] == "commit")
        if not commits:
            return None
        own: dict[str, float] = {}
        for call in CALLS:
            mine = [line for line in lines if line["call"] == call]
            per_batch = len(mine) / commits
            for key, field in (("ms", "wall_ms"), ("cpu_ms", "cpu_ms")):
                value = statistics.median(m[field] for m in mine) * per_batch if mine else 0.0
                own[f"{call}_{key}"] = round(value, 2)
        own["wall_ms"] = round(sum(own[f"{call}_ms"] for call in CALLS), 2)
        own["cpu_ms"] = round(sum(own[f"{call}_cpu_ms"] for call in CALLS), 2)
        return own


def own_summary(runs: list[dict[str, Any]], floor_runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Median over rounds of a case's own time per micro-batch, and of its excess over the
    floor's own time in the same round; {} unless every round has it."""
    pairs = list(zip(runs, floor_runs, strict=True))
    if not pairs or any(not r.get("own") or not f.get("own") for r, f in pairs):
        return {}
    keys = runs[0]["own"].keys()
    own: dict[str, Any] = {k: statistics.median(r["own"][k] for r in runs) for k in keys}
    own["over_floor_ms"] = statistics.median(
        r["own"]["wall_ms"] - f["own"]["wall_ms"] for r, f in pairs
    )
    own["over_floor_cpu_ms"] = statistics.median(
        r["own"]["cpu_ms"] - f["own"]["cpu_ms"] for r, f in pairs
    )
    for call in CALLS:
        own[f"{call}_over_floor_ms"] = statistics.median(
            r["own"][f"{call}_ms"] - f["own"][f"{call}_ms"] for r, f in pairs
        )
    return own


def latency_cases(
    rounds: dict[str, list[dict[str, Any]]], descriptions: dict[str, str]
) -> dict[str, dict[str, Any]]:
    """Per case: the median over rounds of p50/p95, the overhead over the floor per round
    (its median), rows/s = 100 / p50 seconds."""
    floor_rounds = rounds[FLOOR]
    cases: dict[str, dict[str, Any]] = {}
    for name, runs in rounds.items():
        p50 = statistics.median(r["p50_ms"] for r in runs)
        p95 = statistics.median(r["p95_ms"] for r in runs)
        over50 = [r["p50_ms"] - f["p50_ms"] for r, f in zip(runs, floor_rounds, strict=True)]
        over95 = [r["p95_ms"] - f["p95_ms"] for r, f in zip(runs, floor_rounds, strict=True)]
        # the write alone (addBatch), without Spark's offset and commit logs
        over_add = [
            r["add_batch_p50_ms"] - f["add_batch_p50_ms"]
            for r, f in zip(runs, floor_rounds, strict=True)
        ]
        floor_p50 = statistics.median(f["p50_ms"] for f in floor_rounds)
        cases[name] = {
            "name": name,
            "description": descriptions[name],
            "rows_per_batch": ROWS_PER_BATCH,
            "p50_ms": p50,
            "p95_ms": p95,
            "add_batch_p50_ms": statistics.median(r["add_batch_p50_ms"] for r in runs),
            "add_batch_p95_ms": statistics.median(r["add_batch_p95_ms"] for r in runs),
            "overhead_p50_ms": statistics.median(over50),
            "overhead_p95_ms": statistics.median(over95),
            "add_batch_overhead_p50_ms": statistics.median(over_add),
            "phases_p50_ms": {
                phase: statistics.median(r["phases_p50_ms"][phase] for r in runs)
                for phase in (*PHASES, "other")
            },
            "own": own_summary(runs, floor_rounds) if name != "spark-noop" else {},
            "rows_per_s": ROWS_PER_BATCH / (p50 / 1000) if p50 > 0 else 0.0,
            "ratio_to_floor": floor_p50 / p50 if p50 > 0 else None,
            "rounds": runs,
        }
    return cases


def history_summary(ms: list[float]) -> dict[str, Any]:
    window = min(HISTORY_WINDOW, max(1, len(ms) // 4))
    first = statistics.median(ms[:window])
    last = statistics.median(ms[-window:])
    ratio = last / first if first > 0 else None
    return {
        "batches": len(ms),
        "window": window,
        "first_median_ms": first,
        "last_median_ms": last,
        "last_over_first": ratio,
        "flat": ratio is not None and ratio <= FLAT_RATIO,
    }


# --------------------------------------------------------------------------- iceberg's ceiling


def iceberg_commit_ceiling(workdir: Path, commits: int, warmup: int) -> dict[str, Any]:
    """The destination library's own commit, for the ``iceberg`` case: in this process (no
    Spark), two tables of the page's catalog layout grow side by side, one 100-row data
    file per commit, written outside the timing; one is committed through pyiceberg's
    own API (``table.transaction()``, ``fast_append``, its ``commit_transaction``), the
    other through the ``iceberg`` sink's ``commit`` (the ledger read, the fenced commit,
    the snapshot summary). Medians of the commits after ``warmup``, in ms."""
    import datetime

    import pyarrow as pa

    from quixsinks.core.batch import SinkBatch, WriteContext
    from quixsinks.core.sink import CommitContext, Receipt
    from quixsinks.sinks.iceberg import IcebergOptions, IcebergSink

    def rows(i: int) -> pa.Table:
        ids = range(i * ROWS_PER_BATCH, (i + 1) * ROWS_PER_BATCH)
        start = datetime.datetime(2023, 11, 14, tzinfo=datetime.UTC)
        return pa.table(
            {
                "key": [f"k{n % 1000}" for n in ids],
                "id": pa.array(ids, pa.int64()),
                "value": [n / 7 for n in ids],
                "flag": [n % 2 == 0 for n in ids],
                "name": [f"{n:012x}" for n in ids],
                "timestamp": [start + datetime.timedelta(seconds=n) for n in ids],
            }
        )

    folder = workdir / "iceberg-ceiling"
    timed: dict[str, list[float]] = {"pyiceberg": [], "quixsinks": []}
    tables: dict[str, Any] = {}
    try:
        for i in range(warmup + commits):
            for how in timed:  # interleaved: both tables have i snapshots
                batch = rows(i)
                options = {"warehouse": str(folder / how), "table_name": ICEBERG_TABLE}
                sink = IcebergSink(IcebergOptions.from_options(options))
                sink.prepare(batch.schema)
                assert sink.records is not None
                context = WriteContext("ceiling", i, 0, f"a{i}", True, "query")
                files = sink.write(SinkBatch(batch, sink.records, context))
                started = time.perf_counter()
                if how == "quixsinks":
                    receipt = Receipt("ceiling", i, 0, f"a{i}", query_id="query", staged=[files])
                    sink.commit(CommitContext("ceiling", i, True, "query", "iceberg"), [receipt])
                else:
                    table = tables.get(how) or sink._load_table()
                    tables[how] = table
                    with (
                        table.transaction() as tx,
                        tx.update_snapshot().fast_append() as append,
                    ):
                        for data_file in files:
                            append.append_data_file(data_file)
                if i >= warmup:
                    timed[how].append((time.perf_counter() - started) * 1000)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return {
        "commits": commits,
        "snapshots": warmup + commits,
        "pyiceberg_ms": round(statistics.median(timed["pyiceberg"]), 1),
        "quixsinks_ms": round(statistics.median(timed["quixsinks"]), 1),
    }


# --------------------------------------------------------------------------- the page


def settings(args: argparse.Namespace) -> dict[str, int]:
    if args.quick:
        return dict(QUICK)
    return {
        "batches": args.batches,
        "warmup": args.warmup,
        "repeat": args.repeat,
        "history_batches": args.history_batches,
    }


def measure(bench: Bench) -> str:
    args = bench.args
    counts = settings(args)
    skipped = bench.skipped
    for name in SERVERS:
        reason = bench_servers.missing(name)
        if reason is not None:
            for case in {"postgres": ("postgresql",), "redis": ("redis",),
                         "influxdb": ("influxdb3", "influxdb1"),
                         "mosquitto": ("mqtt",)}[name]:  # fmt: skip
                bench.skip(case, reason)
    available = [n for n in SERVERS if bench_servers.missing(n) is None]
    with bench_servers.servers_for(available) as running, bench.stack, own_timings(bench):
        bench.servers = running
        spark = bench_session("quixsinks-bench-latency", args.cores, verbose=args.verbose)
        try:
            register_sinks(spark)
            with listening(spark) as progress:
                cases = [s for s in sinks(bench) if s.name not in skipped]
                rounds, history = timed(spark, progress, cases, bench.workdir, counts)
            info = machine_info(
                spark,
                cores=args.cores,
                rows_per_batch=ROWS_PER_BATCH,
                source="rate-micro-batch (rowsPerBatch=100, numPartitions=1)",
                trigger="default (next micro-batch as soon as the last one ends)",
                **counts,
            )
        finally:
            close_session(spark)
    descriptions = {s.name: s.description for s in cases}
    results = latency_cases(rounds, descriptions)
    histories = {name: history_summary(ms) for name, ms in history.items()}
    ceiling = None
    if "iceberg" in results:
        ceiling = iceberg_commit_ceiling(bench.workdir, counts["batches"], counts["warmup"])
        log(
            f"  iceberg commit in one process: pyiceberg's own {ceiling['pyiceberg_ms']} ms, "
            f"the sink's {ceiling['quixsinks_ms']} ms"
        )
    targets = judge(results, histories, skipped, ceiling)
    document: dict[str, Any] = {
        "benchmark": PAGE.name,
        "title": TITLE,
        "machine": info,
        "floor": FLOOR,
        "all_targets_passed": verdict(targets),
        "cases": results,
        "skipped": dict(skipped),
        "targets": targets,
        "history": {**histories, "flat_ratio": FLAT_RATIO},
        "iceberg_commit": ceiling,
        "history_curve": {"unit": "ms", "ms": history},
    }
    text = markdown(document, counts)
    write_measured(bench, document, text)
    return text


@contextlib.contextmanager
def own_timings(bench: Bench) -> Iterator[None]:
    """``QUIXSINKS_TIMINGS_FILE`` for the Python workers of the session this page starts
    (unless the variable is set already), unset again after the page."""
    if os.environ.get(TIMINGS_ENV):
        yield
        return
    os.environ[TIMINGS_ENV] = str(bench.workdir / "timings.jsonl")
    try:
        yield
    finally:
        os.environ.pop(TIMINGS_ENV, None)


def timed(
    spark: SparkSession,
    progress: Progress,
    cases: list[Sink],
    workdir: Path,
    counts: dict[str, int],
) -> tuple[dict[str, list[dict[str, Any]]], dict[str, list[float]]]:
    """The interleaved rounds, then the history runs."""
    batches, warmup = counts["batches"], counts["warmup"]
    timed_cases = [s for s in cases if not s.history_only]
    rounds: dict[str, list[dict[str, Any]]] = {s.name: [] for s in timed_cases}
    timings = OwnTimings.from_env()
    # one untimed query first: the session's first query pays Spark's and the workers'
    # warm-up, which would otherwise land on the first round's first case
    floor = next(s for s in timed_cases if s.name == FLOOR)
    run_query(spark, progress, floor, workdir / "warm-up", warmup + batches)
    for round_ in range(counts["repeat"]):
        # each round starts one case later: no case always runs first (Spark's JIT
        # warm-up) or always after the same one
        shift = round_ % len(timed_cases)
        for sink in timed_cases[shift:] + timed_cases[:shift]:
            run = workdir / f"{sink.name}-r{round_}"
            started = time.perf_counter()
            window_start = time.time()
            measured = run_query(spark, progress, sink, run, warmup + batches)[warmup:]
            if len(measured) < batches:
                raise RuntimeError(f"{sink.name}: {len(measured)} batches, expected {batches}")
            stats = summary(measured)
            own = None if timings is None else timings.per_batch(window_start, time.time())
            if own is not None and sink.name != "spark-noop":
                stats["own"] = own
            rounds[sink.name].append(stats)
            log(
                f"  round {round_ + 1}/{counts['repeat']} {sink.name:<11} "
                f"p50 {stats['p50_ms']:6.0f} ms  p95 {stats['p95_ms']:6.0f} ms  "
                f"addBatch p50 {stats['add_batch_p50_ms']:5.0f} ms  "
                f"({time.perf_counter() - started:.0f} s)"
            )
    history: dict[str, list[float]] = {}
    total = counts["history_batches"]
    for sink in cases:
        if sink.name == "spark-noop" or total <= 0:
            continue
        started = time.perf_counter()
        measured = run_query(spark, progress, sink, workdir / f"{sink.name}-history", total)
        history[sink.name] = [float(b.get("triggerExecution", 0)) for b in measured]
        h = history_summary(history[sink.name])
        log(
            f"  history {sink.name:<11} {len(measured)} batches: first {h['window']} "
            f"{h['first_median_ms']:.0f} ms, last {h['last_median_ms']:.0f} ms, "
            f"x{h['last_over_first']:.2f} ({time.perf_counter() - started:.0f} s)"
        )
    return rounds, history


def judge(
    cases: dict[str, dict[str, Any]],
    histories: dict[str, dict[str, Any]],
    skipped: dict[str, str],
    iceberg_commit: dict[str, Any] | None = None,
) -> list[dict[str, Any]]:
    targets: list[dict[str, Any]] = []
    for name in SINKS:
        goal = f"{name}: p50 overhead over {FLOOR} <= {MAX_OVERHEAD_MS:g} ms per micro-batch"
        if name not in cases:
            targets.append({"target": goal, "measured": None, "passed": None,
                            "note": skipped.get(name, "not run")})  # fmt: skip
            continue
        overhead = cases[name]["overhead_p50_ms"]
        target = {
            "target": goal,
            "measured": round(overhead, 1),
            "passed": overhead <= MAX_OVERHEAD_MS,
        }
        own = cases[name].get("own")
        if own:
            target["own_over_floor_ms"] = round(own["over_floor_ms"], 1)
            target["commit_over_floor_ms"] = round(own["commit_over_floor_ms"], 1)
            target["why"] = (
                f"quixsinks' own calls add {own['over_floor_ms']:+.0f} ms per micro-batch over "
                f"the floor's (plan {own['plan_over_floor_ms']:+.0f}, write "
                f"{own['write_over_floor_ms']:+.0f}, commit {own['commit_over_floor_ms']:+.0f}); "
                f"the other {overhead - own['over_floor_ms']:+.0f} ms are Spark's own phases"
            )
            if name == "iceberg" and iceberg_commit is not None:
                target["why"] += (
                    f"; pyiceberg's own commit of one prebuilt data file takes "
                    f"{iceberg_commit['pyiceberg_ms']:g} ms in one process (the sink's commit "
                    f"{iceberg_commit['quixsinks_ms']:g} ms in the same loop, "
                    f"{iceberg_commit['snapshots']} snapshots): a commit through pyiceberg "
                    "alone costs more than the target"
                )
        targets.append(target)
    for name in SINKS:
        goal = f"{name}: flat with history, last/first <= {FLAT_RATIO:g}"
        h = histories.get(name)
        if h is None:
            targets.append({"target": goal, "measured": None, "passed": None,
                            "note": skipped.get(name, "not run")})  # fmt: skip
            continue
        ratio = h["last_over_first"]
        target = {
            "target": goal,
            "measured": None if ratio is None else round(ratio, 3),
            "passed": h["flat"],
            "batches": h["batches"],
        }
        keep = histories.get(ICEBERG_KEEP)
        if name == "iceberg" and keep is not None and keep["last_over_first"] is not None:
            target["why"] = (
                "the table keeps every snapshot (the default), and the catalog's commit "
                "loads and copies the whole table metadata each time; with "
                f"keep_snapshots=100 the same run is x{keep['last_over_first']:.2f}"
            )
        targets.append(target)
    return targets


def verdict(targets: list[dict[str, Any]]) -> bool | None:
    measured = [t["passed"] for t in targets if t["passed"] is not None]
    if not all(measured):
        return False
    return True if len(measured) == len(targets) else None


def own_table(document: dict[str, Any]) -> list[str]:
    """quixsinks' own time per micro-batch, and the rest of each case's overhead."""
    cases = {name: c for name, c in document["cases"].items() if c.get("own")}
    if FLOOR not in cases:
        return []
    lines = [
        "",
        "quixsinks' own time per micro-batch (`QUIXSINKS_TIMINGS_FILE`): ms inside its calls "
        "from Spark, median per call times calls per batch (`plan` twice, `write` includes "
        "the wait for Spark's rows), median over rounds; *own over floor* is the part of the "
        "overhead spent in the sink's calls, *rest* the overhead outside them (Spark's own "
        "phases, slower on a host whose 2 cores the sink's extra CPU and its server share):",
        "",
        "| case | `plan` ms | `write` ms | `commit` ms | own ms | own CPU ms | own over floor ms "
        "| `commit` over floor ms | rest of the overhead ms |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name, c in cases.items():
        own = c["own"]
        floor = name == FLOOR
        lines.append(
            f"| {name} | {own['plan_ms']:.1f} | {own['write_ms']:.1f} | {own['commit_ms']:.1f} | "
            f"{own['wall_ms']:.1f} | {own['cpu_ms']:.1f} | "
            f"{'(floor)' if floor else format(own['over_floor_ms'], '+.1f')} | "
            f"{'' if floor else format(own['commit_over_floor_ms'], '+.1f')} | "
            f"{'' if floor else format(c['overhead_p50_ms'] - own['over_floor_ms'], '+.0f')} |"
        )
    return lines


def markdown(document: dict[str, Any], counts: dict[str, int]) -> str:
    info = document["machine"]
    lines = [
        f"# {TITLE}",
        "",
        f"{ROWS_PER_BATCH} rows per micro-batch (`rate-micro-batch`, one partition), "
        f"{counts['batches']} micro-batches after {counts['warmup']} warm-up ones per run, "
        f"median of {counts['repeat']} interleaved rounds; {info.get('spark_master')} on "
        f"{info.get('host_cores')} host cores; Python {info['python']}, PySpark "
        f"{info['pyspark']}, pyarrow {info['pyarrow']}; {info['date']}.",
        "",
        "| case | p50 ms | p95 ms | addBatch p50 ms | over floor p50 ms | over floor p95 ms "
        "| addBatch over floor p50 ms | history first -> last ms (x) |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    history = document["history"]

    def trend(name: str) -> str:
        h = history.get(name)
        if not h or h["last_over_first"] is None:
            return ""
        return (
            f"{h['first_median_ms']:.0f} -> {h['last_median_ms']:.0f} "
            f"(x{h['last_over_first']:.3f}, {h['batches']} batches)"
        )

    for name, c in document["cases"].items():
        floor = name == FLOOR
        lines.append(
            f"| {name} | {c['p50_ms']:.0f} | {c['p95_ms']:.0f} | {c['add_batch_p50_ms']:.0f} | "
            f"{'(floor)' if floor else format(c['overhead_p50_ms'], '+.0f')} | "
            f"{'' if floor else format(c['overhead_p95_ms'], '+.0f')} | "
            f"{'' if floor else format(c['add_batch_overhead_p50_ms'], '+.0f')} | {trend(name)} |"
        )
    for name, h in history.items():
        if isinstance(h, dict) and name not in document["cases"]:
            lines.append(f"| {name} (history only) | | | | | | | {trend(name)} |")
    for name, reason in document["skipped"].items():
        lines.append(f"| {name} | | | | | | | skipped: {reason.replace('|', '/')} |")
    lines += [
        "",
        "Where a micro-batch's time goes: p50 ms of each of Spark's phases (median over "
        "rounds; `other` is the rest of `triggerExecution`; p50s do not add up exactly):",
        "",
        "| case | " + " | ".join(f"`{p}`" for p in (*PHASES, "other")) + " |",
        "| --- |" + " ---: |" * (len(PHASES) + 1),
    ]
    for name, c in document["cases"].items():
        phases = c.get("phases_p50_ms", {})
        cells = " | ".join(f"{phases.get(p, 0):.0f}" for p in (*PHASES, "other"))
        lines.append(f"| {name} | {cells} |")
    lines += own_table(document)
    ceiling = document.get("iceberg_commit")
    if ceiling:
        lines += [
            "",
            "Iceberg's own commit, the ceiling of the `iceberg` case: in the page's process "
            f"(no Spark), two tables grown side by side to {ceiling['snapshots']} snapshots, "
            "one 100-row data file per commit written outside the timing; median of the last "
            f"{ceiling['commits']} commits: pyiceberg's own API (`table.transaction()`, "
            f"`fast_append`) **{ceiling['pyiceberg_ms']:g} ms**, the sink's `commit` (ledger "
            f"read, fenced commit, snapshot summary) **{ceiling['quixsinks_ms']:g} ms**.",
        ]
    lines += [
        "",
        "Targets (issue #31):",
        "",
        "| target | measured | result |",
        "| --- | ---: | --- |",
    ]
    for t in document["targets"]:
        if t["passed"] is None:
            lines.append(f"| {t['target']} | | not measured: {t.get('note', '')} |")
        else:
            lines.append(
                f"| {t['target']} | {t['measured']:g} | {'pass' if t['passed'] else 'FAIL'} |"
            )
    windows = [h["window"] for h in history.values() if isinstance(h, dict)]
    window = max(windows, default=HISTORY_WINDOW)
    lines += ["", NOTES.format(flat=FLAT_RATIO, window=window).strip(), ""]
    return "\n".join(lines)


NOTES = """
Times are Spark's own per-batch `durationMs` from a StreamingQueryListener:
`triggerExecution` is the whole micro-batch (offsets, planning, the write, the commit
logs), `addBatch` the write alone. Overhead = the case's p50 minus the floor's p50 of the
same round, median over rounds (the target's figure); the same for `addBatch` alone, which
leaves out Spark's offset and commit logs (`walCommit`, `commitOffsets`: local checkpoint
writes, whatever the sink; their times are in the phase table). `spark-noop` is
informational: what Spark's Python data source path itself costs over a JVM sink.
History: one query per sink of the page's `--history-batches` micro-batches; the median
per-batch time of the first and of the last {window} batches (at most 100; a quarter of
the run when it is shorter) and last/first; "flat" when it is <= {flat:g}.
"""


def arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--batches",
        type=int,
        default=BATCHES,
        help=f"timed micro-batches per run (default {BATCHES})",
    )
    parser.add_argument(
        "--warmup",
        type=int,
        default=WARMUP,
        help=f"micro-batches dropped before them (default {WARMUP})",
    )
    parser.add_argument(
        "--history-batches",
        type=int,
        default=HISTORY_BATCHES,
        help=f"micro-batches of each sink's history run (default {HISTORY_BATCHES}; 0: none)",
    )


PAGE = Page(
    name="latency",
    title=TITLE,
    doc=__doc__ or "",
    case_names=CASES[1:],
    servers=SERVERS,
    repeat=3,
    arguments=arguments,
    measure=measure,
)

main = PAGE.main


if __name__ == "__main__":
    import sys

    sys.exit(main())
