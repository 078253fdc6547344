"""Pub/Sub benchmark: the pubsub sink vs Quix Streams' PubSubSink and a raw publisher.

One local session and one Google Pub/Sub emulator on 127.0.0.1 (``PubSubEmulator`` from
``tests/services/pubsub_emulator.py``: the Google Cloud SDK's emulator) take the same
cached DataFrame (``--rows`` rows, default 200,000, the foundation benchmark's mixed
columns); every row becomes one message (the JSON object of ``id, value, flag, name``,
with the key as the ``_key`` attribute):

* ``noop-arrow``: the quixsinks Arrow writer path with a do-nothing sink (the floor);
* ``pubsub``: the ``pubsub`` sink (PublishRequests of 1,000 messages built in Arrow, 4 in
  flight per task, ``qs_dedupe_id`` on every message);
* ``quix-pubsub``: Quix Streams' ``PubSubSink`` into the same emulator, fed the same rows
  as Python dicts through ``add()`` (one ``publish()`` per message, every future kept in a
  list that is never cleared) and one ``flush()`` at the end, in this process, with its
  defaults (the client's batch settings: 100 messages per request); timed on a sample
  when all rows would take more than ``QUIX_MAX_SECONDS``;
* ``server-limit``: the emulator's own limit: the GAPIC ``publish`` RPC called directly
  with pre-built requests of 1,000 messages (the same data and attributes) from 4 threads.

Each run publishes to a fresh topic with one subscription (created and deleted outside the
timing); after the warm-up run the subscription must hold ``--rows`` messages (pulled and
counted).

Target (issue): ``pubsub`` >= 5x ``quix-pubsub``.

Run: ``.venv/bin/python benchmarks/bench_pubsub.py [--rows N] [--quick]``.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import tempfile
import time
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

NAME = "pubsub"
ROOT = BENCH_DIR.parent
VALUES = ("id", "value", "flag", "name")
QUIX_SPEC = "quixstreams"
QUIX_MODULE = "quixstreams.sinks.community.pubsub"
QUIX_MAX_SECONDS = 60.0
QUIX_SAMPLE_ROWS = 50_000
QUIX_PROBE_ROWS = 10_000
REQUEST_MESSAGES = 1000

CASE_NAMES = ("pubsub", "quix-pubsub", "server-limit")

TARGETS: tuple[RelativeTarget, ...] = (("pubsub", "quix-pubsub", 5.0),)


def log(line: str) -> None:
    print(line, flush=True)


def topic_of(path: str) -> str:
    return "b-" + hashlib.sha1(path.encode()).hexdigest()[:12]


@dataclass
class Server:
    emulator: Any  # tests.services.pubsub_emulator.PubSubEmulator

    def fresh(self, path: str) -> None:
        self.emulator.create_topic(topic_of(path), ordering=False)

    def count_rows(self, path: str) -> int:
        return len(self.emulator.pull_all(topic_of(path), idle_seconds=2.0))

    def cleanup(self, path: str) -> None:
        topic = topic_of(path)
        subscriber = self.emulator.subscriber()
        try:
            subscriber.delete_subscription(
                subscription=subscriber.subscription_path(self.emulator.project, f"{topic}-sub")
            )
        finally:
            subscriber.close()
        self.emulator.delete_topic(topic)

    def case(self, name: str, write: Any, description: str, rows: int | None = None) -> Case:
        return Case(
            name,
            write,
            description,
            count_rows=self.count_rows,
            setup=self.fresh,
            cleanup=self.cleanup,
            rows=rows,
        )


def sink_writer(server: Server) -> Any:
    def write(df: DataFrame, path: str) -> None:
        options = {
            **server.emulator.options(topic_of(path)),
            "key_column": "id",
            "value_columns": ",".join(VALUES),
            "check_topic": "false",
        }
        df.write.format("pubsub").mode("append").options(**options).save()

    return write


@dataclass
class QuixFeed:
    """Quix Streams' PubSubSink and the rows it is fed (built outside the timing)."""

    sink_class: Any
    server: Server
    rows: list[dict[str, Any]] = field(default_factory=list)

    def load(self, table: Any) -> None:
        self.rows = table.select(list(VALUES)).to_pylist()

    def run(self, count: int, topic: str) -> None:
        emulator = self.server.emulator
        os.environ["PUBSUB_EMULATOR_HOST"] = emulator.emulator_host  # how Quix's client finds it
        try:
            sink = self.sink_class(project_id=emulator.project, topic_id=topic, flush_timeout=120)
            sink.setup()
            add = sink.add
            rows = self.rows
            for offset in range(count):
                value = rows[offset]
                add(
                    value=value,
                    key=str(value["id"]).encode(),
                    timestamp=0,
                    headers=[],
                    topic="bench",
                    partition=0,
                    offset=offset,
                )
            sink.flush()
            sink._client.stop()
        finally:
            del os.environ["PUBSUB_EMULATOR_HOST"]

    def case(self, count: int, all_rows: int) -> Case:
        def write(df: DataFrame, path: str) -> None:
            self.run(count, topic_of(path))

        return self.server.case(
            "quix-pubsub",
            write,
            "Quix Streams PubSubSink: add() per row (publish, futures kept), one flush(), in "
            "one process" + ("" if count == all_rows else f" ({count:_} rows)"),
            rows=count,
        )


def _load_quix() -> Any:
    import importlib

    return importlib.import_module(QUIX_MODULE).PubSubSink


def quix_rows_for(feed: QuixFeed, arrow: Any, rows: int) -> tuple[int, dict[str, Any]]:
    probe = min(rows, QUIX_PROBE_ROWS)
    feed.load(arrow.slice(0, probe))
    feed.server.fresh("probe")
    started = time.perf_counter()
    feed.run(probe, topic_of("probe"))
    seconds = time.perf_counter() - started
    feed.server.cleanup("probe")
    estimate = rows * seconds / probe
    chosen = rows if estimate <= QUIX_MAX_SECONDS else min(rows, QUIX_SAMPLE_ROWS)
    log(f"Quix probe: {probe:_} rows in {seconds:.2f} s; timing Quix on {chosen:_} rows")
    feed.load(arrow.slice(0, chosen))
    return chosen, {"probe_rows": probe, "probe_seconds": round(seconds, 3)}


def limit_case(server: Server, arrow: Any) -> Case:
    """Pre-built PublishRequests of 1,000 messages through the GAPIC publish RPC."""
    from google.pubsub_v1.types import PubsubMessage

    rows = arrow.select(list(VALUES)).to_pylist()
    messages = [
        PubsubMessage(
            data=json.dumps(r, separators=(",", ":")).encode(), attributes={"_key": str(r["id"])}
        )
        for r in rows
    ]
    chunks = [messages[i : i + REQUEST_MESSAGES] for i in range(0, len(messages), REQUEST_MESSAGES)]

    def write(df: DataFrame, path: str) -> None:
        publisher = server.emulator.publisher()
        topic = publisher.topic_path(server.emulator.project, topic_of(path))
        try:
            with ThreadPoolExecutor(4) as pool:
                list(
                    pool.map(
                        lambda chunk: publisher._gapic_publish(topic=topic, messages=chunk),
                        chunks,
                    )
                )
        finally:
            publisher.transport.close()

    return server.case(
        "server-limit",
        write,
        f"GAPIC publish of pre-built requests of {REQUEST_MESSAGES} messages, 4 threads: "
        "the emulator's limit",
    )


NOTES = """
Targets (issue), on the best times' rows/s:
{targets}
One message per row: the JSON object of `id, value, flag, name` ({value_bytes} bytes on
average) with the key (`id`) as the `_key` attribute. `pubsub` is the quixsinks sink
(PublishRequests of 1,000 messages built in Arrow and sent on the cached PublisherClient's
gRPC channel, 4 in flight per task, each answered before the task ends, a `qs_dedupe_id`
per message). `quix-pubsub` is Quix
Streams {quix_version} `PubSubSink` with its defaults (the client's 100 messages per
request): construction, `setup()` (`get_topic`), one `add()` per row (one `publish()`,
futures kept in a list never cleared) and one `flush()`, in the driver
process{quix_sample}. `server-limit` calls the publish RPC directly with pre-built requests of
1,000 messages from 4 threads: what the emulator ingests on this machine. The emulator is
the Google Cloud SDK's ({emulator}) on 127.0.0.1; each run publishes to a fresh topic
with one subscription, counted after the warm-up.
"""


def main(argv: list[str] | None = None) -> int:
    parser = argument_parser(__doc__.splitlines()[0], rows=200_000)
    parser.add_argument("--no-install", action="store_true", help="do not pip-install quix")
    args = parser.parse_args(argv)
    partitions = args.partitions or args.cores
    wanted = selected_cases(args.cases, CASE_NAMES)
    skipped: dict[str, str] = {}
    quix_class = None
    if "quix-pubsub" in wanted:
        quix_class, reason = import_or_install(
            QUIX_SPEC, _load_quix, install=not args.no_install, log=log
        )
        if reason:
            skipped["quix-pubsub"] = reason
            log(f"skipping quix-pubsub: {reason}")

    sys.path.insert(0, str(ROOT))
    from tests.services.pubsub_emulator import PubSubEmulator, find_emulator, missing_reason

    reason = missing_reason()
    if reason is not None:
        log(f"cannot run the Pub/Sub benchmark: {reason}")
        return 0 if not args.strict else 1

    workdir = Path(tempfile.mkdtemp(prefix="quixsinks-bench-pubsub-", dir=args.tmp))
    extra: dict[str, Any] = {}
    with PubSubEmulator() as emulator:
        server = Server(emulator)
        spark = bench_session("quixsinks-bench-pubsub", args.cores, verbose=args.verbose)
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
                server.case(
                    "pubsub", sink_writer(server), "pubsub sink, batches of 1,000 messages"
                ),
            ]
            if "server-limit" in wanted:
                cases.append(limit_case(server, arrow))
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
            launcher = find_emulator()
            info = machine_info(
                spark,
                rows=args.rows,
                repeat=args.repeat,
                partitions=partitions,
                emulator=str(launcher.resolve().parents[1]) if launcher else "",
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
        quix_version=quix.get("quixstreams", "(not run)"),
        quix_sample=(
            f"; timed on the first {quix['rows']:,} rows, its rows/s compared as is"
            if quix and quix.get("rows") != args.rows
            else ""
        ),
        emulator=Path(info["emulator"]).name,
    )
    markdown = write_results(
        args.out,
        NAME,
        title="quixsinks Pub/Sub benchmark: the pubsub sink vs Quix Streams on the emulator",
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
