"""Redis benchmark: the redis sink (string, hash) vs Quix Streams' RedisSink and redis-benchmark.

One local session and one throwaway redis-server on 127.0.0.1 (``RedisServer`` from
``tests/services/redis_server.py``: Debian's redis-server, nothing on disk, a password)
take the same cached DataFrame (``--rows`` rows, the foundation benchmark's six mixed
columns); every row becomes one key ``b:<id>`` (unique):

* ``noop-arrow``: the quixsinks Arrow writer path with a do-nothing sink (the floor);
* ``redis-string``: the ``redis`` sink, ``data_type=string``: key ``b:<id>``, value the JSON
  of the value columns (Quix's behaviour), one ``MSET`` of ``pipeline_size`` keys (default
  1,000) per round trip;
* ``redis-hash``: ``data_type=hash``: ``HSET b:<id>`` one field per value column;
* ``quix-redis``: Quix Streams' ``RedisSink`` into the same server, fed the same rows
  as Python dicts through ``add()`` and one ``flush()`` in this process (one MULTI/EXEC
  per flush, ``json.dumps`` values), timed on a sample when all rows would take more than
  ``QUIX_MAX_SECONDS``;
* ``server-limit``: ``redis-benchmark -P 1000 -t set -n <rows> -r <rows> -d <value
  bytes>`` (50 clients, 1,000 commands per pipeline): the server's own limit for SETs of
  the same size, wall time of the process.

Each run starts from an empty server (FLUSHALL before, outside the timing); after the
warm-up the server must hold ``--rows`` keys (DBSIZE).

Targets (issue): ``redis-string`` >= 10x ``quix-redis``; ``redis-string`` >= 0.5x
``server-limit`` (redis-benchmark).

Run: ``.venv/bin/python benchmarks/bench_redis.py [--rows N]``.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import time
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

NAME = "redis"
ROOT = BENCH_DIR.parent
KEY_TEMPLATE = "b:{id}"
VALUES = ("id", "value", "flag", "name")
QUIX_SPEC = "quixstreams"
QUIX_MODULE = "quixstreams.sinks.community.redis"
QUIX_MAX_SECONDS = 60.0
QUIX_SAMPLE_ROWS = 100_000
QUIX_PROBE_ROWS = 20_000
PIPELINE = 1000

CASE_NAMES = ("redis-string", "redis-hash", "quix-redis", "server-limit")

TARGETS: tuple[RelativeTarget, ...] = (
    ("redis-string", "quix-redis", 10.0),
    ("redis-string", "server-limit", 0.5),
)


def log(line: str) -> None:
    print(line, flush=True)


@dataclass
class Server:
    server: Any  # tests.services.redis_server.RedisServer
    client: Any = None

    def fresh(self, path: str) -> None:
        self.client.flushall()

    def count_rows(self, path: str) -> int:
        return int(self.client.dbsize())

    def cleanup(self, path: str) -> None:
        self.client.flushall()


def sink_writer(server: Server, data_type: str) -> Any:
    options = {
        **server.server.options,
        "data_type": data_type,
        "key_template": KEY_TEMPLATE,
        "value_columns": ",".join(VALUES),
        "pipeline_size": str(PIPELINE),
    }

    def write(df: DataFrame, path: str) -> None:
        df.write.format("redis").mode("append").options(**options).save()

    return write


@dataclass
class QuixFeed:
    """Quix Streams' RedisSink and the rows it is fed (built outside the timing)."""

    sink_class: Any
    server: Server
    rows: list[dict[str, Any]] = field(default_factory=list)

    def load(self, table: Any) -> None:
        self.rows = table.select(list(VALUES)).to_pylist()

    def run(self, count: int) -> None:
        srv = self.server.server
        sink = self.sink_class(host=srv.host, port=srv.port, db=0, password=srv.password)
        sink.setup()
        add = sink.add
        rows = self.rows
        for offset in range(count):
            value = rows[offset]
            add(
                value=value,
                key=f"b:{value['id']}",
                timestamp=0,
                headers=[],
                topic="bench",
                partition=0,
                offset=offset,
            )
        sink.flush()

    def case(self, count: int, all_rows: int) -> Case:
        def write(df: DataFrame, path: str) -> None:
            self.run(count)

        return Case(
            "quix-redis",
            write,
            "Quix Streams RedisSink: add() per row, one flush() (MULTI/EXEC of SETs), in "
            "one process" + ("" if count == all_rows else f" ({count:_} rows)"),
            count_rows=self.server.count_rows,
            setup=self.server.fresh,
            cleanup=self.server.cleanup,
            rows=count,
        )


def _load_quix() -> Any:
    import importlib

    return importlib.import_module(QUIX_MODULE).RedisSink


def quix_rows_for(feed: QuixFeed, arrow: Any, rows: int) -> tuple[int, dict[str, Any]]:
    probe = min(rows, QUIX_PROBE_ROWS)
    feed.load(arrow.slice(0, probe))
    feed.server.fresh("")
    started = time.perf_counter()
    feed.run(probe)
    seconds = time.perf_counter() - started
    feed.server.cleanup("")
    estimate = rows * seconds / probe
    chosen = rows if estimate <= QUIX_MAX_SECONDS else min(rows, QUIX_SAMPLE_ROWS)
    log(f"Quix probe: {probe:_} rows in {seconds:.2f} s; timing Quix on {chosen:_} rows")
    feed.load(arrow.slice(0, chosen))
    return chosen, {"probe_rows": probe, "probe_seconds": round(seconds, 3)}


def benchmark_case(server: Server, rows: int, value_bytes: int) -> Case:
    binary = shutil.which("redis-benchmark")
    assert binary is not None
    srv = server.server
    command = [
        binary, "-h", srv.host, "-p", str(srv.port), "-a", srv.password,
        "-P", str(PIPELINE), "-t", "set", "-n", str(rows), "-r", str(rows),
        "-d", str(value_bytes), "-q",
    ]  # fmt: skip

    def write(df: DataFrame, path: str) -> None:
        subprocess.run(command, check=True, capture_output=True, timeout=600)

    return Case(
        "server-limit",
        write,
        f"redis-benchmark -P {PIPELINE} -t set -n {rows} -r {rows} -d {value_bytes} "
        "(50 clients): the server's limit for SETs of this size",
        count_rows=None,
        setup=server.fresh,
        cleanup=server.cleanup,
    )


NOTES = """
Targets (issue), on the best times' rows/s:
{targets}
Keys `b:<id>` (unique per row). `redis-string` writes `b:<id>` = the JSON object of id,
value, flag, name ({value_bytes} bytes on average) as one `MSET` of {pipeline} keys per
round trip, `redis-hash` `HSET b:<id>` with those four fields in pipelines of {pipeline}
commands; both through the `redis` sink (RESP built in Arrow, SinkBatches of 1 MiB, one
connection per Python worker). `quix-redis` is Quix
Streams {quix_version} `RedisSink`: construction, `setup()`, one `add()` per row (key
`b:<id>`, the same four values as a dict) and one `flush()` (a MULTI/EXEC pipeline of
`SET key json.dumps(value)`) in the driver process{quix_sample}. `server-limit` is
`redis-benchmark`, Redis's own tool (`-P {pipeline} -t set`, 50 clients, random keys
over the row count, values of the same size): the server's limit on this machine. The
server is Debian's {redis_version} on 127.0.0.1, `--save '' --appendonly no`, emptied
before each run.
"""


def main(argv: list[str] | None = None) -> int:
    parser = argument_parser(__doc__.splitlines()[0], rows=1_000_000)
    parser.add_argument("--no-install", action="store_true", help="do not pip-install quix")
    args = parser.parse_args(argv)
    partitions = args.partitions or args.cores
    wanted = selected_cases(args.cases, CASE_NAMES)
    skipped: dict[str, str] = {}
    quix_class = None
    if "quix-redis" in wanted:
        quix_class, reason = import_or_install(
            QUIX_SPEC, _load_quix, install=not args.no_install, log=log
        )
        if reason:
            skipped["quix-redis"] = reason
            log(f"skipping quix-redis: {reason}")

    sys.path.insert(0, str(ROOT))
    from tests.services.redis_server import RedisServer

    workdir = Path(tempfile.mkdtemp(prefix="quixsinks-bench-redis-", dir=args.tmp))
    extra: dict[str, Any] = {}
    with RedisServer() as redis_server:
        server = Server(redis_server, redis_server.client())
        spark = bench_session("quixsinks-bench-redis", args.cores, verbose=args.verbose)
        try:
            quixsinks.register(spark)
            register_floor(spark)
            log(f"building {args.rows:_} cached rows in {partitions} partitions ...")
            df = mixed_dataframe(spark, args.rows, partitions)
            arrow = df.toArrow()
            sample = arrow.select(list(VALUES)).slice(0, 1000).to_pylist()
            value_bytes = round(
                sum(len(json.dumps(r, separators=(",", ":"))) for r in sample) / len(sample)
            )
            cases = [
                floor_case(),
                Case(
                    "redis-string",
                    sink_writer(server, "string"),
                    f"redis sink, data_type=string (MSET of keys, JSON values), "
                    f"pipeline_size={PIPELINE}",
                    count_rows=server.count_rows,
                    setup=server.fresh,
                    cleanup=server.cleanup,
                ),
                Case(
                    "redis-hash",
                    sink_writer(server, "hash"),
                    f"redis sink, data_type=hash (HSET 4 fields), pipeline_size={PIPELINE}",
                    count_rows=server.count_rows,
                    setup=server.fresh,
                    cleanup=server.cleanup,
                ),
                benchmark_case(server, args.rows, value_bytes),
            ]
            if quix_class is not None:
                import importlib.metadata

                feed = QuixFeed(quix_class, server)
                quix_rows, decision = quix_rows_for(feed, arrow, args.rows)
                extra["quix"] = {
                    "quixstreams": importlib.metadata.version("quixstreams"),
                    "rows": quix_rows,
                    **decision,
                }
                cases.append(feed.case(quix_rows, args.rows))
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
            version = subprocess.run(
                [redis_server.binary, "--version"], capture_output=True, text=True, check=False
            ).stdout.split(" sha=")[0]
            info = machine_info(
                spark,
                rows=args.rows,
                repeat=args.repeat,
                partitions=partitions,
                redis_server=version,
                value_bytes=value_bytes,
                skipped=skipped,
                **extra,
            )
        finally:
            close_session(spark)
    shutil.rmtree(workdir, ignore_errors=True)
    judged, verdict = judge_targets(results, TARGETS, skipped)
    quix = extra.get("quix", {})
    notes = NOTES.format(
        targets=targets_markdown(judged),
        value_bytes=info["value_bytes"],
        pipeline=PIPELINE,
        quix_version=quix.get("quixstreams", "(not run)"),
        quix_sample=(
            f"; timed on the first {quix['rows']:,} rows, its rows/s compared as is"
            if quix and quix.get("rows") != args.rows
            else ""
        ),
        redis_version=info["redis_server"],
    )
    markdown = write_results(
        args.out,
        NAME,
        title="quixsinks Redis benchmark: the redis sink vs Quix Streams and redis-benchmark",
        info=info,
        results=results,
        floor=FLOOR,
        notes=notes,
        skipped=skipped,
        extra={"targets": judged, "all_targets_passed": verdict},
    )
    print()
    print(markdown)
    failed = [f"{t['case']} vs {t['against']}" for t in judged if t["passed"] is False]
    if failed:
        print(f"below target: {', '.join(failed)}", file=sys.stderr)
        return 1 if args.strict else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
