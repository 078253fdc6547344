"""Kinesis benchmark: the kinesis sink vs Quix Streams' KinesisSink and kinesalite's limit.

One local session and one throwaway kinesalite on 127.0.0.1 (``KinesaliteServer`` from
``tests/services/kinesalite.py``, in memory) take the same cached DataFrame (``--rows``
rows, the foundation benchmark's six mixed columns: ``key`` is the partition key, ``id``,
``value``, ``flag`` and ``name`` the JSON value). Each run puts every row into a new
four-shard stream, deleted after the run:

* ``noop-arrow``: the quixsinks Arrow writer path with a do-nothing sink (the floor);
* ``kinesis``: the ``kinesis`` sink, defaults (requests of 500 records, ``max_inflight=4``
  per task, a dedupe id in each JSON value);
* ``kinesis-throttled``: the same through ``KinesisFaultProxy`` refusing 10% of the
  entries with ``ProvisionedThroughputExceededException`` (seeded): the sink resends them;
  the stream must hold every row exactly once;
* ``quix-kinesis``: Quix Streams' ``KinesisSink`` on the same server, fed the same rows as
  Python dicts through ``add()`` and one ``flush()`` in this process (PutRecords of 500,
  one request at a time, per-record failures never read);
* ``quix-kinesis-throttled``: the same through the proxy: the records it refuses are lost,
  and the benchmark counts them (``quix_lost`` in the JSON, per run);
* ``server-limit``: prebuilt PutRecords requests of 500 JSON records sent by plain boto3
  from 4 threads, no serialisation in the timing: kinesalite's own limit on this machine.

After the warm-up the stream must hold ``--rows`` records (GetRecords), except for
``quix-kinesis-throttled``, whose landed and lost records are reported instead.

Targets (issue): ``kinesis`` >= 5x ``quix-kinesis``; ``kinesis-throttled`` loses nothing
(checked: the row count). The proxy is a Python HTTP server in this process, on the path of
both throttled cases alike.

Run: ``.venv/bin/python benchmarks/bench_kinesis.py [--rows N] [--quick]``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from harness import Bench, Case, Destination, Page, command_output
from harness.quix import add_all
from harness.servers import kinesalite_version, kinesis_fault_proxy

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

VALUES = ("id", "value", "flag", "name")
SHARDS = 4
THROTTLE = 0.1
LIMIT_THREADS = 4


def stream_for(path: str) -> str:
    return "bench-" + hashlib.sha1(path.encode()).hexdigest()[:12]


@dataclass
class Server(Destination):
    """kinesalite (a fresh stream per run) and the throttling proxy in front of it."""

    server: Any
    proxy: Any
    landed: dict[str, list[int]] = field(default_factory=dict)

    def fresh(self, path: str) -> None:
        self.server.create_stream(stream_for(path), shards=SHARDS)

    def count_rows(self, path: str) -> int:
        return len(self.server.read_all(stream_for(path)))

    def cleanup(self, path: str) -> None:
        self.server.client().delete_stream(StreamName=stream_for(path))

    def options(self, path: str, *, throttled: bool) -> dict[str, str]:
        options = {k: str(v) for k, v in self.server.options().items()}
        if throttled:
            options["endpoint_url"] = self.proxy.url
        return options

    def counting_cleanup(self, case: str) -> Any:
        """A cleanup that first records how many records the run left in its stream."""

        def cleanup(path: str) -> None:
            self.landed.setdefault(case, []).append(self.count_rows(path))
            self.cleanup(path)

        return cleanup


def sink_case(server: Server, name: str, *, throttled: bool) -> Case:
    def write(df: DataFrame, path: str) -> None:
        options = {
            **server.options(path, throttled=throttled),
            "stream_name": stream_for(path),
            "value_columns": ",".join(VALUES),
            "retry_backoff_seconds": "0.05",
        }
        df.write.format("kinesis").mode("append").options(**options).save()

    what = f" through the proxy refusing {THROTTLE:.0%} of entries" if throttled else ""
    return server.case(
        name, write, f"kinesis sink (PutRecords of 500, max_inflight=4 per task, dedupe ids){what}"
    )


@dataclass
class QuixFeed:
    """Quix Streams' KinesisSink and the rows it is fed (built outside the timing)."""

    sink_class: Any
    server: Server
    rows: list[dict[str, Any]] = field(default_factory=list)
    keys: list[bytes] = field(default_factory=list)

    def load(self, table: Any) -> None:
        self.rows = table.select(list(VALUES)).to_pylist()
        self.keys = [k.encode() for k in table.column("key").to_pylist()]

    def run(self, path: str, *, throttled: bool) -> None:
        options = self.server.options(path, throttled=throttled)
        sink = self.sink_class(
            stream_name=stream_for(path),
            aws_access_key_id=options["aws_access_key_id"],
            aws_secret_access_key=options["aws_secret_access_key"],
            region_name=options["region_name"],
            aws_endpoint_url=options["endpoint_url"],
        )
        sink.setup()
        add_all(sink, self.rows, self.keys)

    def case(self, name: str, *, throttled: bool) -> Case:
        def write(df: DataFrame, path: str) -> None:
            self.run(path, throttled=throttled)

        if throttled:
            return Case(
                name,
                write,
                "Quix Streams KinesisSink through the proxy refusing "
                f"{THROTTLE:.0%} of entries: refused records are lost (counted)",
                count_rows=None,
                setup=self.server.fresh,
                cleanup=self.server.counting_cleanup(name),
            )
        return self.server.case(
            name,
            write,
            "Quix Streams KinesisSink: add() per row, one flush() (PutRecords of 500, "
            "one at a time), in one process",
        )


def limit_case(server: Server, arrow: Any) -> Case:
    rows = arrow.select(list(VALUES)).to_pylist()
    keys = arrow.column("key").to_pylist()
    entries = [
        {"Data": json.dumps(r).encode(), "PartitionKey": k} for r, k in zip(rows, keys, strict=True)
    ]
    requests = [entries[i : i + 500] for i in range(0, len(entries), 500)]
    client = server.server.client()

    def write(df: DataFrame, path: str) -> None:
        stream = stream_for(path)

        def put(records: list[dict[str, Any]]) -> None:
            answer = client.put_records(StreamName=stream, Records=records)
            if answer["FailedRecordCount"]:
                raise RuntimeError("kinesalite refused records")

        with ThreadPoolExecutor(LIMIT_THREADS) as pool:
            list(pool.map(put, requests))

    return server.case(
        "server-limit",
        write,
        f"plain boto3 PutRecords of 500 prebuilt JSON records from {LIMIT_THREADS} threads: "
        "kinesalite's own limit",
    )


def cases(bench: Bench) -> list[Case]:
    kinesalite = bench.servers["kinesalite"]
    logging.getLogger("quixsinks.delivery").setLevel(logging.ERROR)
    proxy = kinesis_fault_proxy(kinesalite.endpoint_url, throttle_fraction=THROTTLE, seed=1)
    bench.stack.enter_context(proxy)
    server = bench.state["server"] = Server(kinesalite, proxy)
    bench.info.update(
        kinesalite=kinesalite_version(),
        node=command_output(["node", "--version"]),
        shards=SHARDS,
        throttle_fraction=THROTTLE,
    )
    found = [
        sink_case(server, "kinesis", throttled=False),
        sink_case(server, "kinesis-throttled", throttled=True),
        limit_case(server, bench.arrow()),
    ]
    quix = bench.peer(
        ["quix-kinesis", "quix-kinesis-throttled"],
        "quixstreams.sinks.community.kinesis",
        "KinesisSink",
    )
    if quix is not None:
        feed = QuixFeed(quix, server)
        feed.load(bench.arrow())
        found.append(feed.case("quix-kinesis", throttled=False))
        found.append(feed.case("quix-kinesis-throttled", throttled=True))
    return found


NOTES = """
Every row is one record: partition key `k0`..`k999`, data the JSON object of `id`, `value`,
`flag`, `name` (the sink adds its 32-character `_dedupe_id`). kinesalite {kinesalite} (Node
{node}, in memory, one process) is the server of every case, four shards per stream; it
never throttles by itself. `server-limit` is kinesalite's own ceiling here: the records
built before the run, {threads} threads of plain boto3 (which serializes and signs each
request while timed, in the driver; kinesalite's one Node thread is the bottleneck).
Quix Streams {quix_version} `KinesisSink`
sends PutRecords of 500 from one thread and never reads the per-record failures.

With {throttle:.0%} of the entries refused by the proxy (`ProvisionedThroughputExceededException`,
as a throttled shard answers): the `kinesis` sink resent the refused entries and every run's
stream held all {rows:,} rows (checked after the warm-up); Quix lost {quix_lost}.
"""


def notes(bench: Bench) -> str:
    server, rows = bench.state["server"], bench.rows
    landed = server.landed.get("quix-kinesis-throttled", [])
    lost = [rows - n for n in landed]
    bench.extra.update(
        quix_lost=lost,
        quix_throttled_landed=landed,
        entries_refused_by_proxy=server.proxy.entries_refused,
    )
    quix_lost = (
        f"{min(lost):,} to {max(lost):,} of {rows:,} records per run "
        f"({min(lost) / rows:.1%} to {max(lost) / rows:.1%}), silently"
        if lost
        else "(not run)"
    )
    return NOTES.format(
        kinesalite=bench.info["kinesalite"],
        node=bench.info["node"],
        threads=LIMIT_THREADS,
        quix_version=bench.quix_version(),
        throttle=THROTTLE,
        rows=rows,
        quix_lost=quix_lost,
    )


PAGE = Page(
    name="kinesis",
    title="quixsinks Kinesis benchmark: the kinesis sink vs Quix Streams and kinesalite",
    doc=__doc__ or "",
    cases=cases,
    case_names=(
        "kinesis",
        "kinesis-throttled",
        "quix-kinesis",
        "quix-kinesis-throttled",
        "server-limit",
    ),
    targets=(("kinesis", "quix-kinesis", 5.0),),
    notes=notes,
    servers=("kinesalite",),
    rows=200_000,
)

main = PAGE.main


if __name__ == "__main__":
    sys.exit(main())
