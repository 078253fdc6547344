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
import threading
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from harness import Bench, Case, Page, command_output, log
from harness.quix import add_all
from harness.servers import mqtt_recorder

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

VALUES = ("id", "value", "flag", "name")
INFLIGHT = 1000
#: Quix's Application flushes its sinks at each checkpoint; paho's packet ids wrap at 65,535,
#: and a message whose id is still queued is refused ("Message queue full"), so Quix's sink
#: fails past 65,535 unacknowledged messages between two flushes: flush at least this often
QUIX_FLUSH_EVERY = 60_000
#: the cases read back once before the timing
CHECKED = ("mqtt", "mqtt-v5", "quix-mqtt")


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

    def write(self, df: DataFrame, path: str) -> None:
        sink = self.sink_class(
            client_id=f"quix-{uuid.uuid4().hex[:8]}",
            server=self.broker.host,
            port=self.broker.port,
            topic_root=root_for(path),
            tls_enabled=False,
            qos=1,
        )
        sink.setup()
        # checkpoints: paho refuses a 65,536th unacknowledged message
        add_all(sink, self.rows, self.keys, flush_every=QUIX_FLUSH_EVERY)
        sink._cleanup()


def limit_case(broker: Any, arrow: Any, partitions: int) -> Case:
    rows = arrow.select(list(VALUES)).to_pylist()
    lines = [json.dumps(r).encode() + b"\n" for r in rows]
    shares = [b"".join(lines[i::partitions]) for i in range(partitions)]
    binary = shutil.which("mosquitto_pub") or "/usr/bin/mosquitto_pub"

    def write(df: DataFrame, path: str) -> None:
        processes: list[subprocess.Popen[bytes]] = []
        try:
            for i in range(partitions):
                command = [binary, "-h", broker.host, "-p", str(broker.port), "-q", "1"]
                command += ["-M", str(INFLIGHT), "-t", f"{root_for(path)}/{i}", "-l"]
                processes.append(
                    subprocess.Popen(
                        command,
                        stdin=subprocess.PIPE,
                        stdout=subprocess.DEVNULL,
                        stderr=subprocess.PIPE,
                    )
                )
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
        finally:  # none left behind when one failed or timed out
            for process in processes:
                if process.poll() is None:
                    process.kill()
                    process.wait(timeout=30)
                if process.stderr is not None:
                    process.stderr.close()

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
    except BrokenPipeError:  # the process died; its exit status says why
        pass
    finally:
        stdin.close()


def delivered(bench: Bench, case: Case) -> int:
    """One untimed run of ``case`` read back by a QoS 2 subscriber: messages that arrived."""
    path = f"check-{uuid.uuid4().hex}"
    with mqtt_recorder(bench.servers["mosquitto"], root_for(path)) as recorder:
        case.write(bench.df, path)  # type: ignore[arg-type]
        try:
            return len(recorder.wait_for(bench.rows, timeout=600, quiet=1.0))
        except RuntimeError:
            return len(recorder.snapshot())


def cases(bench: Bench) -> list[Case]:
    broker = bench.servers["mosquitto"]
    logging.getLogger("quixsinks.delivery").setLevel(logging.ERROR)
    version = (command_output([broker.binary, "-h"]) or "").split()
    bench.info["mosquitto"] = version[2] if len(version) > 2 else "?"
    found = [
        sink_case(broker, "mqtt", "3.1.1"),
        sink_case(broker, "mqtt-v5", "5"),
        limit_case(broker, bench.arrow(), bench.args.partitions),
    ]
    quix = bench.peer(["quix-mqtt"], "quixstreams.sinks.community.mqtt", "MQTTSink")
    if quix is not None:
        feed = QuixFeed(quix, broker)
        feed.load(bench.arrow())
        description = "Quix Streams MQTTSink: add() per row, one flush(), QoS 1, in one process"
        found.append(Case("quix-mqtt", feed.write, description, count_rows=None))
    counts = bench.extra["delivered"] = {}
    for case in found:
        if case.name in CHECKED and bench.wants(case.name):
            counts[case.name] = delivered(bench, case)
            log(f"{case.name}: {counts[case.name]:,} of {bench.rows:,} delivered")
    return found


NOTES = """
Every row is one QoS 1 message to `<root>/k0`..`<root>/k999`, payload the JSON object of
`id`, `value`, `flag`, `name`. Mosquitto {mosquitto} (Debian, one process, persistence off
for this run's topics: nobody subscribes) is the broker of every case. `server-limit` is
its ceiling here with its own C client (`mosquitto_pub`, {inflight} in flight, one process
per partition). Quix Streams {quix_version} `MQTTSink` publishes one message per `add()`
through paho-mqtt and polls for the acknowledgements once a second in `flush()`.

Read back once before the timing by a QoS 2 subscriber (messages delivered of {rows:,}):
{delivered}.
"""


def notes(bench: Bench) -> str:
    counts = bench.extra.get("delivered", {})
    return NOTES.format(
        mosquitto=bench.info["mosquitto"],
        inflight=INFLIGHT,
        quix_version=bench.quix_version(),
        rows=bench.rows,
        delivered=", ".join(f"`{k}` {v:,}" for k, v in counts.items()) or "(not run)",
    )


PAGE = Page(
    name="mqtt",
    title="quixsinks MQTT benchmark: the mqtt sink vs Quix Streams and mosquitto_pub",
    doc=__doc__ or "",
    cases=cases,
    case_names=("mqtt", "mqtt-v5", "quix-mqtt", "server-limit"),
    targets=(("mqtt", "quix-mqtt", 5.0), ("mqtt", "server-limit", 0.5)),
    notes=notes,
    servers=("mosquitto",),
    rows=100_000,
)

main = PAGE.main


if __name__ == "__main__":
    sys.exit(main())
