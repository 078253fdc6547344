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
  a minute;
* ``server-limit``: ``redis-benchmark -P 1000 -t set -n <rows> -r <rows> -d <value
  bytes>`` (50 clients, 1,000 commands per pipeline): the server's own limit for SETs of
  the same size, wall time of the process.

Each run starts from an empty server (FLUSHALL before, outside the timing); after the
warm-up the server must hold ``--rows`` keys (DBSIZE).

Targets (issue): ``redis-string`` >= 10x ``quix-redis``; ``redis-string`` >= 0.5x
``server-limit`` (redis-benchmark).

Run: ``.venv/bin/python benchmarks/bench_redis.py [--rows N] [--quick]``.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from harness import Bench, Case, Destination, Page, command_output
from harness.quix import add_all

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

KEY_TEMPLATE = "b:{id}"
VALUES = ("id", "value", "flag", "name")
PIPELINE = 1000


@dataclass
class Server(Destination):
    """The redis-server of every case, emptied before and after each run."""

    server: Any
    client: Any = None

    def fresh(self, path: str) -> None:
        self.client.flushall()

    def count_rows(self, path: str) -> int:
        return int(self.client.dbsize())

    def cleanup(self, path: str) -> None:
        self.client.flushall()


def sink_case(server: Server, data_type: str, description: str) -> Case:
    options = {
        **server.server.options,
        "data_type": data_type,
        "key_template": KEY_TEMPLATE,
        "value_columns": ",".join(VALUES),
        "pipeline_size": str(PIPELINE),
    }

    def write(df: DataFrame, path: str) -> None:
        df.write.format("redis").mode("append").options(**options).save()

    return server.case(f"redis-{data_type}", write, description)


@dataclass
class QuixFeed:
    """Quix Streams' RedisSink and the rows it is fed (built outside the timing)."""

    sink_class: Any
    server: Server
    rows: list[dict[str, Any]] = field(default_factory=list)
    keys: list[str] = field(default_factory=list)

    def load(self, table: Any) -> None:
        self.rows = table.select(list(VALUES)).to_pylist()
        self.keys = [KEY_TEMPLATE.format(id=value["id"]) for value in self.rows]

    def write(self, df: DataFrame, path: str) -> None:
        srv = self.server.server
        sink = self.sink_class(host=srv.host, port=srv.port, db=0, password=srv.password)
        sink.setup()
        add_all(sink, self.rows, self.keys)


def limit_case(server: Server, rows: int, value_bytes: int) -> Case:
    binary = shutil.which("redis-benchmark") or "redis-benchmark"
    srv = server.server
    command = [
        binary, "-h", srv.host, "-p", str(srv.port), "-a", srv.password,
        "-P", str(PIPELINE), "-t", "set", "-n", str(rows), "-r", str(rows),
        "-d", str(value_bytes), "-q",
    ]  # fmt: skip

    def write(df: DataFrame, path: str) -> None:
        subprocess.run(command, check=True, capture_output=True, timeout=600)

    return server.case(
        "server-limit",
        write,
        f"redis-benchmark -P {PIPELINE} -t set -n {rows} -r {rows} -d {value_bytes} "
        "(50 clients): the server's limit for SETs of this size",
        count_rows=None,
    )


def cases(bench: Bench) -> list[Case]:
    redis_server = bench.servers["redis"]
    server = Server(redis_server, redis_server.client())
    value_bytes = bench.json_bytes(VALUES)
    bench.info["redis_server"] = (command_output([redis_server.binary, "--version"]) or "?").split(
        " sha="
    )[0]
    found = [
        sink_case(
            server,
            "string",
            f"redis sink, data_type=string (MSET of keys, JSON values), pipeline_size={PIPELINE}",
        ),
        sink_case(
            server, "hash", f"redis sink, data_type=hash (HSET 4 fields), pipeline_size={PIPELINE}"
        ),
        limit_case(server, bench.rows, value_bytes),
    ]
    quix = bench.peer(["quix-redis"], "quixstreams.sinks.community.redis", "RedisSink")
    if quix is not None:
        feed = QuixFeed(quix, server)
        found.append(
            bench.sampled(
                server.case(
                    "quix-redis",
                    feed.write,
                    "Quix Streams RedisSink: add() per row, one flush() (MULTI/EXEC of SETs), "
                    "in one process",
                ),
                feed.load,
            )
        )
    return found


NOTES = """
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


def notes(bench: Bench) -> str:
    return NOTES.format(
        value_bytes=bench.info["value_bytes"],
        pipeline=PIPELINE,
        quix_version=bench.quix_version(),
        quix_sample=bench.quix_note(),
        redis_version=bench.info["redis_server"],
    )


PAGE = Page(
    name="redis",
    title="quixsinks Redis benchmark: the redis sink vs Quix Streams and redis-benchmark",
    doc=__doc__ or "",
    cases=cases,
    case_names=("redis-string", "redis-hash", "quix-redis", "server-limit"),
    targets=(("redis-string", "quix-redis", 10.0), ("redis-string", "server-limit", 0.5)),
    notes=notes,
    servers=("redis",),
    rows=1_000_000,
)

main = PAGE.main


if __name__ == "__main__":
    sys.exit(main())
