"""MQTT benchmark: the mqtt sink vs Quix Streams' MQTTSink and mosquitto's own limit.

One local session and one throwaway Mosquitto on 127.0.0.1 (``MosquittoServer`` from
``tests/services/mosquitto.py``, its plain listener) take the same cached DataFrame
(``--rows`` rows, the foundation benchmark's six mixed columns: ``key`` names the topic
``<root>/<key>``, ``id``, ``value``, ``flag`` and ``name`` the JSON payload). Every case
publishes every row at QoS 1 and waits for every PUBACK:

* ``noop-arrow``: the quixsinks Arrow writer path with a do-nothing sink (the floor);
* ``mqtt``: the ``mqtt`` sink, defaults (MQTT 3.1.1, windows of ``max_inflight=1000``);
* ``mqtt-v5``: the same with MQTT 5 (each message carries its ``qs_dedupe_id`` property);
* ``quix-mqtt``: Quix Streams' ``MQTTSink`` on the same broker, fed the same rows as Python
  dicts through ``add()`` and a ``flush()`` per 60,000 rows and at the end, in this process
  (paho's network thread, paho's 20 messages in flight; its flush polls once a second; more
  than 65,535 unacknowledged messages between two flushes make paho refuse the next one);
* ``server-limit``: ``mosquitto_pub -l -q 1 -M 1000`` fed prebuilt JSON lines on stdin,
  one process per Spark partition at once, no serialisation in the timing: the broker's
  own limit with its own C client.

Nobody subscribes during the timed runs (a subscriber in this process would slow the
in-process Quix case most). Before the timing, one untimed run of ``mqtt``, ``mqtt-v5`` and
``quix-mqtt`` each is read back by a QoS 2 subscriber: each must deliver ``--rows``
messages (``delivered`` in the JSON).

Targets (issue): ``mqtt`` >= 5x ``quix-mqtt``; ``mqtt`` >= 0.5x ``server-limit``.

Run: ``.venv/bin/python benchmarks/bench_mqtt.py [--rows N] [--quick]``.
"""

from __future__ import annotations

import json
import logging
import shutil
import subprocess
import sys
import tempfile
import threading
import uuid
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

NAME = "mqtt"
ROOT = BENCH_DIR.parent
VALUES = ("id", "value", "flag", "name")
QUIX_SPEC = "quixstreams[mqtt]==3.28.1"
QUIX_MODULE = "quixstreams.sinks.community.mqtt"
INFLIGHT = 1000
#: Quix's Application flushes its sinks at each checkpoint; paho's packet ids wrap at 65,535,
#: and a message whose id is still queued is refused ("Message queue full"), so Quix's sink
#: fails past 65,535 unacknowledged messages between two flushes: flush at least this often
QUIX_FLUSH_EVERY = 60_000

CASE_NAMES = ("mqtt", "mqtt-v5", "quix-mqtt", "server-limit")

TARGETS: tuple[RelativeTarget, ...] = (
    ("mqtt", "quix-mqtt", 5.0),
    ("mqtt", "server-limit", 0.5),
)


def log(line: str) -> None:
    print(line, flush=True)


def root_for(path: str) -> str:
    return "bench/" + uuid.uuid5(uuid.NAMESPACE_URL, path).hex[:12]


def sink_case(broker: Any, name: str, version: str) -> Case:
    def write(df: DataFrame, path: str) -> None:
        options = {
            **broker.options(),
            "client_id": "bench",
            "topic_root": root_for(path),
            "version": version,
            "value_columns": ",".join(VALUES),
            "timestamp_column": "none",
        }
        df.write.format("mqtt").mode("append").options(**options).save()

    extra = ", a qs_dedupe_id user property per message" if version == "5" else ""
    return Case(
        name,
        write,
        f"mqtt sink, MQTT {version}, QoS 1, windows of {INFLIGHT} per task{extra}",
        count_rows=None,
    )


@dataclass
class QuixFeed:
    """Quix Streams' MQTTSink and the rows it is fed (built outside the timing)."""

    sink_class: Any
    broker: Any
    rows: list[dict[str, Any]] = field(default_factory=list)
    keys: list[bytes] = field(default_factory=list)

    def load(self, table: Any) -> None:
        self.rows = table.select(list(VALUES)).to_pylist()
        self.keys = [k.encode() for k in table.column("key").to_pylist()]

    def run(self, path: str) -> None:
        sink = self.sink_class(
            client_id=f"quix-{uuid.uuid4().hex[:8]}",
            server=self.broker.host,
            port=self.broker.port,
            topic_root=root_for(path),
            tls_enabled=False,
            qos=1,
        )
        sink.setup()
        add, rows, keys = sink.add, self.rows, self.keys
        for offset, value in enumerate(rows):
            add("bench", 0, offset, keys[offset], value, 0, [])
            if offset % QUIX_FLUSH_EVERY == QUIX_FLUSH_EVERY - 1:
                sink.flush()  # a checkpoint: paho refuses a 65,536th unacknowledged message
        sink.flush()
        sink._cleanup()

    def case(self) -> Case:
        def write(df: DataFrame, path: str) -> None:
            self.run(path)

        return Case(
            "quix-mqtt",
            write,
            "Quix Streams MQTTSink: add() per row, one flush(), QoS 1, in one process",
            count_rows=None,
        )


def limit_case(broker: Any, arrow: Any, partitions: int) -> Case:
    rows = arrow.select(list(VALUES)).to_pylist()
    lines = [json.dumps(r).encode() + b"\n" for r in rows]
    shares = [b"".join(lines[i::partitions]) for i in range(partitions)]
    binary = shutil.which("mosquitto_pub") or "/usr/bin/mosquitto_pub"

    def write(df: DataFrame, path: str) -> None:
        processes = [
            subprocess.Popen(
                [
                    binary,
                    "-h",
                    broker.host,
                    "-p",
                    str(broker.port),
                    "-q",
                    "1",
                    "-M",
                    str(INFLIGHT),
                    "-t",
                    f"{root_for(path)}/{i}",
                    "-l",
                ],
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
            )
            for i in range(partitions)
        ]
        feeders = []
        for process, share in zip(processes, shares, strict=True):
            assert process.stdin is not None
            feeder = threading.Thread(target=_feed, args=(process.stdin, share), daemon=True)
            feeder.start()
            feeders.append(feeder)
        for feeder in feeders:  # the feeder closes stdin: no communicate() racing it
            feeder.join(timeout=600)
        for process in processes:
            process.wait(timeout=600)
            err = process.stderr.read() if process.stderr is not None else b""
            if process.returncode:
                raise RuntimeError(f"mosquitto_pub failed: {err.decode(errors='replace')}")

    return Case(
        "server-limit",
        write,
        f"{partitions} mosquitto_pub -l -q 1 -M {INFLIGHT} processes fed prebuilt JSON lines: "
        "the broker's own limit",
        count_rows=None,
    )


def _feed(stdin: Any, data: bytes) -> None:
    try:
        stdin.write(data)
    finally:
        stdin.close()


def delivered(broker: Any, rows: int, write: Any) -> int:
    """One untimed run read back by a QoS 2 subscriber: how many messages arrived."""
    from tests.services.mosquitto import Recorder

    path = f"check-{uuid.uuid4().hex}"
    with Recorder(broker, root_for(path)) as recorder:
        write(path)
        try:
            return len(recorder.wait_for(rows, timeout=600, quiet=1.0))
        except RuntimeError:
            return len(recorder.snapshot())


def _load_quix() -> Any:
    import importlib

    return importlib.import_module(QUIX_MODULE).MQTTSink


NOTES = """
Targets (issue), on the best times' rows/s:
{targets}

Every row is one QoS 1 message to `<root>/k0`..`<root>/k999`, payload the JSON object of
`id`, `value`, `flag`, `name`. Mosquitto {mosquitto} (Debian, one process, persistence off
for this run's topics: nobody subscribes) is the broker of every case. `server-limit` is
its ceiling here with its own C client (`mosquitto_pub`, {inflight} in flight, one process
per partition). Quix Streams {quix_version} `MQTTSink` publishes one message per `add()`
through paho-mqtt and polls for the acknowledgements once a second in `flush()`.

Read back once before the timing by a QoS 2 subscriber (messages delivered of {rows:,}):
{delivered}.
"""


def main(argv: list[str] | None = None) -> int:
    parser = argument_parser(__doc__.splitlines()[0], rows=100_000)
    parser.add_argument("--no-install", action="store_true", help="do not pip-install quix")
    args = parser.parse_args(argv)
    partitions = args.partitions or args.cores
    wanted = selected_cases(args.cases, CASE_NAMES)
    skipped: dict[str, str] = {}
    quix_class = None
    if "quix-mqtt" in wanted:
        quix_class, reason = import_or_install(
            QUIX_SPEC, _load_quix, install=not args.no_install, log=log
        )
        if reason:
            skipped["quix-mqtt"] = reason
            log(f"skipping quix-mqtt: {reason}")

    sys.path.insert(0, str(ROOT))
    from tests.services.mosquitto import MosquittoServer

    logging.getLogger("quixsinks.delivery").setLevel(logging.ERROR)
    workdir = Path(tempfile.mkdtemp(prefix="quixsinks-bench-mqtt-", dir=args.tmp))
    extra: dict[str, Any] = {}
    counts: dict[str, int] = {}
    with MosquittoServer() as broker:
        spark = bench_session("quixsinks-bench-mqtt", args.cores, verbose=args.verbose)
        try:
            quixsinks.register(spark)
            register_floor(spark)
            log(f"building {args.rows:_} cached rows in {partitions} partitions ...")
            df = mixed_dataframe(spark, args.rows, partitions)
            arrow = df.toArrow()
            cases = [
                floor_case(),
                sink_case(broker, "mqtt", "3.1.1"),
                sink_case(broker, "mqtt-v5", "5"),
                limit_case(broker, arrow, partitions),
            ]
            feed = None
            if quix_class is not None:
                import importlib.metadata

                feed = QuixFeed(quix_class, broker)
                feed.load(arrow)
                extra["quix"] = {"quixstreams": importlib.metadata.version("quixstreams")}
                cases.append(feed.case())
            del arrow
            cases = [c for c in cases if c.name in wanted or c.name == FLOOR]
            for case in cases:
                if case.name in ("mqtt", "mqtt-v5", "quix-mqtt"):
                    counts[case.name] = delivered(
                        broker, args.rows, lambda path, c=case: c.write(df, path)
                    )
                    log(f"{case.name}: {counts[case.name]:,} of {args.rows:,} delivered")
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
                [broker.binary, "-h"], capture_output=True, text=True, check=False
            ).stdout.splitlines()
            info = machine_info(
                spark,
                rows=args.rows,
                repeat=args.repeat,
                partitions=partitions,
                mosquitto=(
                    version[0].split()[2] if version and len(version[0].split()) > 2 else "?"
                ),
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
        mosquitto=info["mosquitto"],
        inflight=INFLIGHT,
        quix_version=quix.get("quixstreams", "(not run)"),
        rows=args.rows,
        delivered=", ".join(f"`{k}` {v:,}" for k, v in counts.items()) or "(not run)",
    )
    markdown = write_results(
        args.out,
        NAME,
        title="quixsinks MQTT benchmark: the mqtt sink vs Quix Streams and mosquitto_pub",
        info=info,
        results=results,
        floor=FLOOR,
        notes=notes,
        skipped=skipped,
        extra={"targets": judged, "all_targets_passed": verdict, "delivered": counts},
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
