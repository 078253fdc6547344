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
import shutil
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
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

NAME = "kinesis"
ROOT = BENCH_DIR.parent
VALUES = ("id", "value", "flag", "name")
SHARDS = 4
THROTTLE = 0.1
QUIX_SPEC = "quixstreams[kinesis]"
QUIX_MODULE = "quixstreams.sinks.community.kinesis"
LIMIT_THREADS = 4

CASE_NAMES = (
    "kinesis",
    "kinesis-throttled",
    "quix-kinesis",
    "quix-kinesis-throttled",
    "server-limit",
)

TARGETS: tuple[RelativeTarget, ...] = (("kinesis", "quix-kinesis", 5.0),)


def log(line: str) -> None:
    print(line, flush=True)


def stream_for(path: str) -> str:
    return "bench-" + hashlib.sha1(path.encode()).hexdigest()[:12]


@dataclass
class Server:
    server: Any  # tests.services.kinesalite.KinesaliteServer
    proxy: Any  # tests.services.kinesis_faults.KinesisFaultProxy
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
    return Case(
        name,
        write,
        f"kinesis sink (PutRecords of 500, max_inflight=4 per task, dedupe ids){what}",
        count_rows=server.count_rows,
        setup=server.fresh,
        cleanup=server.cleanup,
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
        add, rows, keys = sink.add, self.rows, self.keys
        for offset, value in enumerate(rows):
            add(
                value=value,
                key=keys[offset],
                timestamp=0,
                headers=[],
                topic="bench",
                partition=0,
                offset=offset,
            )
        sink.flush()

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
        return Case(
            name,
            write,
            "Quix Streams KinesisSink: add() per row, one flush() (PutRecords of 500, "
            "one at a time), in one process",
            count_rows=self.server.count_rows,
            setup=self.server.fresh,
            cleanup=self.server.cleanup,
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

    return Case(
        "server-limit",
        write,
        f"plain boto3 PutRecords of 500 prebuilt JSON records from {LIMIT_THREADS} threads: "
        "kinesalite's own limit",
        count_rows=server.count_rows,
        setup=server.fresh,
        cleanup=server.cleanup,
    )


def _load_quix() -> Any:
    import importlib

    return importlib.import_module(QUIX_MODULE).KinesisSink


NOTES = """
Targets (issue), on the best times' rows/s:
{targets}

Every row is one record: partition key `k0`..`k999`, data the JSON object of `id`, `value`,
`flag`, `name` (the sink adds its 32-character `_dedupe_id`). kinesalite {kinesalite} (Node
{node}, in memory, one process) is the server of every case, four shards per stream; it
never throttles by itself. `server-limit` is kinesalite's own ceiling here: prebuilt
requests, no serialisation, {threads} threads. Quix Streams {quix_version} `KinesisSink`
sends PutRecords of 500 from one thread and never reads the per-record failures.

With {throttle:.0%} of the entries refused by the proxy (`ProvisionedThroughputExceededException`,
as a throttled shard answers): the `kinesis` sink resent the refused entries and every run's
stream held all {rows:,} rows (checked after the warm-up); Quix lost {quix_lost}.
"""


def main(argv: list[str] | None = None) -> int:
    parser = argument_parser(__doc__.splitlines()[0], rows=200_000)
    parser.add_argument("--no-install", action="store_true", help="do not pip-install quix")
    args = parser.parse_args(argv)
    partitions = args.partitions or args.cores
    wanted = selected_cases(args.cases, CASE_NAMES)
    skipped: dict[str, str] = {}
    quix_class = None
    if {"quix-kinesis", "quix-kinesis-throttled"} & wanted:
        quix_class, reason = import_or_install(
            QUIX_SPEC, _load_quix, install=not args.no_install, log=log
        )
        if reason:
            skipped["quix-kinesis"] = skipped["quix-kinesis-throttled"] = reason
            log(f"skipping quix-kinesis: {reason}")

    sys.path.insert(0, str(ROOT))
    from tests.services.kinesalite import KINESALITE_DIR, KinesaliteServer
    from tests.services.kinesis_faults import KinesisFaultProxy

    logging.getLogger("quixsinks.delivery").setLevel(logging.ERROR)
    workdir = Path(tempfile.mkdtemp(prefix="quixsinks-bench-kinesis-", dir=args.tmp))
    extra: dict[str, Any] = {}
    with KinesaliteServer() as kinesalite:
        proxy = KinesisFaultProxy(kinesalite.endpoint_url, throttle_fraction=THROTTLE, seed=1)
        with proxy:
            server = Server(kinesalite, proxy)
            spark = bench_session("quixsinks-bench-kinesis", args.cores, verbose=args.verbose)
            try:
                quixsinks.register(spark)
                register_floor(spark)
                log(f"building {args.rows:_} cached rows in {partitions} partitions ...")
                df = mixed_dataframe(spark, args.rows, partitions)
                arrow = df.toArrow()
                cases = [
                    floor_case(),
                    sink_case(server, "kinesis", throttled=False),
                    sink_case(server, "kinesis-throttled", throttled=True),
                    limit_case(server, arrow),
                ]
                if quix_class is not None:
                    import importlib.metadata

                    feed = QuixFeed(quix_class, server)
                    feed.load(arrow)
                    extra["quix"] = {"quixstreams": importlib.metadata.version("quixstreams")}
                    cases.append(feed.case("quix-kinesis", throttled=False))
                    cases.append(feed.case("quix-kinesis-throttled", throttled=True))
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
                package = json.loads((KINESALITE_DIR / "package.json").read_text())
                import subprocess

                node = subprocess.run(
                    ["node", "--version"], capture_output=True, text=True, check=False
                ).stdout.strip()
                info = machine_info(
                    spark,
                    rows=args.rows,
                    repeat=args.repeat,
                    partitions=partitions,
                    kinesalite=package.get("version"),
                    node=node,
                    shards=SHARDS,
                    throttle_fraction=THROTTLE,
                    skipped=skipped,
                    **extra,
                )
            finally:
                close_session(spark)
    shutil.rmtree(workdir, ignore_errors=True)
    landed = server.landed.get("quix-kinesis-throttled", [])
    lost = [args.rows - n for n in landed]
    extra["quix_throttled_landed"] = landed
    extra["quix_lost"] = lost
    extra["entries_refused_by_proxy"] = proxy.entries_refused
    judged, verdict = judge_targets(results, TARGETS, skipped)
    quix = extra.get("quix", {})
    quix_lost = (
        f"{min(lost):,} to {max(lost):,} of {args.rows:,} records per run "
        f"({min(lost) / args.rows:.1%} to {max(lost) / args.rows:.1%}), silently"
        if lost
        else "(not run)"
    )
    notes = NOTES.format(
        targets=targets_markdown(judged),
        kinesalite=info["kinesalite"],
        node=info["node"],
        threads=LIMIT_THREADS,
        quix_version=quix.get("quixstreams", "(not run)"),
        throttle=THROTTLE,
        rows=args.rows,
        quix_lost=quix_lost,
    )
    markdown = write_results(
        args.out,
        NAME,
        title="quixsinks Kinesis benchmark: the kinesis sink vs Quix Streams and kinesalite",
        info=info,
        results=results,
        floor=FLOOR,
        notes=notes,
        skipped=skipped,
        extra={
            "targets": judged,
            "all_targets_passed": verdict,
            "quix_lost": lost,
            "quix_throttled_landed": landed,
            "entries_refused_by_proxy": proxy.entries_refused,
        },
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
