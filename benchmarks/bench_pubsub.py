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
  when all rows would take more than a minute;
* ``server-limit``: the emulator's own limit: the publish RPC called directly with
  requests of 1,000 messages (the same data and attributes) serialized before the run,
  sent as bytes on a gRPC channel from 8 threads (as many requests in flight as the
  sink's two tasks have).

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
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from harness import Bench, Case, Destination, Page
from harness.quix import add_all
from harness.servers import pubsub_emulator_name

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

VALUES = ("id", "value", "flag", "name")
REQUEST_MESSAGES = 1000
#: requests in flight for the server limit: as many as the sink's two tasks (4 each)
LIMIT_THREADS = 8


def topic_of(path: str) -> str:
    return "b-" + hashlib.sha1(path.encode()).hexdigest()[:12]


@dataclass
class Server(Destination):
    """The emulator: a fresh topic with one subscription per run, counted by pulling."""

    emulator: Any

    def fresh(self, path: str) -> None:
        self.emulator.create_topic(topic_of(path), ordering=False)

    def count_rows(self, path: str) -> int:
        return self.emulator.count_all(topic_of(path), idle_seconds=2.0)

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


def sink_case(server: Server) -> Case:
    def write(df: DataFrame, path: str) -> None:
        options = {
            **server.emulator.options(topic_of(path)),
            "key_column": "id",
            "value_columns": ",".join(VALUES),
            "check_topic": "false",
        }
        df.write.format("pubsub").mode("append").options(**options).save()

    return server.case("pubsub", write, "pubsub sink, batches of 1,000 messages")


@dataclass
class QuixFeed:
    """Quix Streams' PubSubSink and the rows it is fed (built outside the timing)."""

    sink_class: Any
    server: Server
    rows: list[dict[str, Any]] = field(default_factory=list)
    keys: list[bytes] = field(default_factory=list)

    def load(self, table: Any) -> None:
        self.rows = table.select(list(VALUES)).to_pylist()
        self.keys = [str(value["id"]).encode() for value in self.rows]

    def write(self, df: DataFrame, path: str) -> None:
        emulator = self.server.emulator
        os.environ["PUBSUB_EMULATOR_HOST"] = emulator.emulator_host  # how Quix's client finds it
        try:
            sink = self.sink_class(
                project_id=emulator.project, topic_id=topic_of(path), flush_timeout=120
            )
            sink.setup()
            add_all(sink, self.rows, self.keys)
            sink._client.stop()
        finally:
            del os.environ["PUBSUB_EMULATOR_HOST"]


def limit_case(server: Server, arrow: Any) -> Case:
    """PublishRequests of 1,000 messages serialized beforehand, sent as bytes on a gRPC
    channel by :data:`LIMIT_THREADS` threads: nothing is serialized while timed (each run
    only puts its topic's few bytes before every request's messages)."""
    from google.pubsub_v1.types import PublishRequest, PubsubMessage

    rows = arrow.select(list(VALUES)).to_pylist()
    messages = [
        PubsubMessage(
            data=json.dumps(r, separators=(",", ":")).encode(), attributes={"_key": str(r["id"])}
        )
        for r in rows
    ]
    # a request's fields in any order are one message: each run puts its topic first
    bodies = [
        PublishRequest.serialize(PublishRequest(messages=messages[i : i + REQUEST_MESSAGES]))
        for i in range(0, len(messages), REQUEST_MESSAGES)
    ]

    def write(df: DataFrame, path: str) -> None:
        publisher = server.emulator.publisher()
        topic = publisher.topic_path(server.emulator.project, topic_of(path))
        head = PublishRequest.serialize(PublishRequest(topic=topic))
        requests = [head + body for body in bodies]
        rpc = publisher.transport.grpc_channel.unary_unary("/google.pubsub.v1.Publisher/Publish")
        try:
            with ThreadPoolExecutor(LIMIT_THREADS) as pool:
                list(pool.map(lambda request: rpc(request, timeout=60), requests))
        finally:
            publisher.transport.close()

    return server.case(
        "server-limit",
        write,
        f"publish RPC of pre-serialized requests of {REQUEST_MESSAGES} messages, "
        f"{LIMIT_THREADS} threads: the emulator's limit",
    )


def cases(bench: Bench) -> list[Case]:
    server = Server(bench.servers["pubsub"])
    bench.json_bytes(VALUES)
    bench.info["emulator"] = pubsub_emulator_name()
    found = [sink_case(server), limit_case(server, bench.arrow())]
    quix = bench.peer(["quix-pubsub"], "quixstreams.sinks.community.pubsub", "PubSubSink")
    if quix is not None:
        feed = QuixFeed(quix, server)
        description = (
            "Quix Streams PubSubSink: add() per row (publish, futures kept), one flush(), in "
            "one process"
        )
        found.append(
            bench.sampled(
                server.case("quix-pubsub", feed.write, description),
                feed.load,
                sample=50_000,
                probe=10_000,
            )
        )
    return found


NOTES = """
One message per row: the JSON object of `id, value, flag, name` ({value_bytes} bytes on
average) with the key (`id`) as the `_key` attribute. `pubsub` is the quixsinks sink
(PublishRequests of 1,000 messages built in Arrow and sent on the cached PublisherClient's
gRPC channel, 4 in flight per task, each answered before the task ends, a `qs_dedupe_id`
per message). `quix-pubsub` is Quix
Streams {quix_version} `PubSubSink` with its defaults (the client's 100 messages per
request): construction, `setup()` (`get_topic`), one `add()` per row (one `publish()`,
futures kept in a list never cleared) and one `flush()`, in the driver
process{quix_sample}. `server-limit` calls the publish RPC directly with requests of
1,000 messages serialized before the run, from {limit_threads} threads (the sink's two tasks
have 4 requests in flight each): what the emulator ingests on this machine. The emulator is
the Google Cloud SDK's ({emulator}) on 127.0.0.1; each run publishes to a fresh topic
with one subscription, counted after the warm-up.
"""


def notes(bench: Bench) -> str:
    return NOTES.format(
        value_bytes=bench.info["value_bytes"],
        quix_version=bench.quix_version(),
        quix_sample=bench.quix_note(),
        emulator=bench.info["emulator"],
        limit_threads=LIMIT_THREADS,
    )


PAGE = Page(
    name="pubsub",
    title="quixsinks Pub/Sub benchmark: the pubsub sink vs Quix Streams on the emulator",
    doc=__doc__ or "",
    cases=cases,
    case_names=("pubsub", "quix-pubsub", "server-limit"),
    targets=(("pubsub", "quix-pubsub", 5.0),),
    notes=notes,
    servers=("pubsub",),
    rows=200_000,
)

main = PAGE.main


if __name__ == "__main__":
    sys.exit(main())
