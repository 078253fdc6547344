"""A streaming job for the driver-kill test: file source -> `file`, `csvfile`, `postgresql`.

Run as a script; the test kills its whole process group (driver, JVM, Python workers)
at random moments and starts it again from the same checkpoints.

    python kill_job.py IN OUT_DIR OUT_CSV CHECKPOINTS [--available-now]

Which queries run is set by environment variables, each holding the sink's options as JSON:

  QUIXSINKS_KILL_PG           `postgresql` (staged)
  QUIXSINKS_KILL_PG_PREPARED  `postgresql-prepared` (write_mode=prepared, two-phase commit)
  QUIXSINKS_KILL_REDIS        `redis` (one hash per event, key event:{id}) and `redis-list`
                              (every event appended to the list `events`)
  QUIXSINKS_KILL_TSDATALAKE   `tsdatalake` (table `events`, partitioned by year/month/day and
                              key; registered in the catalog when the options name one)
  QUIXSINKS_KILL_KINESIS      `kinesis`
  QUIXSINKS_KILL_PUBSUB       `pubsub` (one message per event; at-least-once)
  QUIXSINKS_KILL_ICEBERG      `iceberg`
  QUIXSINKS_KILL_BIGQUERY     `bigquery`
  QUIXSINKS_KILL_INFLUXDB1    `influxdb1` (one series per event: tag `id`)
  QUIXSINKS_KILL_MQTT         `mqtt` (one message per event; at-least-once, MQTT 5 dedupe
                              ids when the options say version 5)
  QUIXSINKS_KILL_DEAD_LETTERS more queries, from a Kafka-shaped stream with unparseable values
                              (input folder IN-kafka): a JSON object name -> [format, options],
                              each with on_error=dead_letter into OUT_DIR-dead/<name>
  QUIXSINKS_KILL_ONLY_FILE    only `file` queries, one per options (a JSON list of them, or
                              one), checkpoints `file-0`, `file-1`... (object-store paths)

`file` and `csvfile` always run otherwise. With QUIXSINKS_KILL_SINK_ID set, every query
writes under that explicit sink id.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from poison import SCHEMA as KAFKA_SCHEMA
from poison import kafka_shaped
from streams import stream_from

import quixsinks
from quixsinks.spark.session import local_session


def main() -> None:
    parser = argparse.ArgumentParser()
    for name in ("input", "out_dir", "out_csv", "checkpoints"):
        parser.add_argument(name)
    parser.add_argument("--available-now", action="store_true")
    args = parser.parse_args()

    spark = local_session("quixsinks-kill-test")
    quixsinks.register(spark)
    df = stream_from(spark, __import__("pathlib").Path(args.input))
    queries = []
    # query name (its checkpoint directory) -> format, options
    sinks: dict[str, tuple[str, dict[str, str]]] = {
        "file": ("file", {"path": args.out_dir}),
        "csvfile": ("csvfile", {"path": args.out_csv}),
    }
    for name, variable in (
        ("postgresql", "QUIXSINKS_KILL_PG"),
        ("postgresql-prepared", "QUIXSINKS_KILL_PG_PREPARED"),
    ):
        if os.environ.get(variable):
            sinks[name] = ("postgresql", json.loads(os.environ[variable]))
    if os.environ.get("QUIXSINKS_KILL_REDIS"):
        redis_options = {"data_type": "hash", "key_template": "event:{id}"}
        redis_options.update(json.loads(os.environ["QUIXSINKS_KILL_REDIS"]))
        sinks["redis"] = ("redis", redis_options)
        sinks["redis-list"] = (
            "redis",
            {**redis_options, "data_type": "list", "key_template": "events"},
        )
    if os.environ.get("QUIXSINKS_KILL_TSDATALAKE"):
        lake_options = {
            "table_name": "events",
            "hive_columns": "year,month,day,key",
            "timestamp_column": "timestamp",
        }
        lake_options.update(json.loads(os.environ["QUIXSINKS_KILL_TSDATALAKE"]))
        sinks["tsdatalake"] = ("tsdatalake", lake_options)
    if os.environ.get("QUIXSINKS_KILL_KINESIS"):
        sinks["kinesis"] = ("kinesis", json.loads(os.environ["QUIXSINKS_KILL_KINESIS"]))
    if os.environ.get("QUIXSINKS_KILL_PUBSUB"):
        sinks["pubsub"] = ("pubsub", json.loads(os.environ["QUIXSINKS_KILL_PUBSUB"]))
    if os.environ.get("QUIXSINKS_KILL_ICEBERG"):
        sinks["iceberg"] = ("iceberg", json.loads(os.environ["QUIXSINKS_KILL_ICEBERG"]))
    if os.environ.get("QUIXSINKS_KILL_BIGQUERY"):
        sinks["bigquery"] = ("bigquery", json.loads(os.environ["QUIXSINKS_KILL_BIGQUERY"]))
    if os.environ.get("QUIXSINKS_KILL_INFLUXDB1"):
        influx_options = {"measurement": "events", "tags_keys": "id"}
        influx_options["fields_keys"] = "key,name,amount"
        influx_options.update(json.loads(os.environ["QUIXSINKS_KILL_INFLUXDB1"]))
        sinks["influxdb1"] = ("influxdb1", influx_options)
    if os.environ.get("QUIXSINKS_KILL_MQTT"):
        sinks["mqtt"] = ("mqtt", json.loads(os.environ["QUIXSINKS_KILL_MQTT"]))
    if os.environ.get("QUIXSINKS_KILL_ONLY_FILE"):
        stores = json.loads(os.environ["QUIXSINKS_KILL_ONLY_FILE"])
        stores = stores if isinstance(stores, list) else [stores]
        sinks = {f"file-{i}": ("file", options) for i, options in enumerate(stores)}
    sink_id = os.environ.get("QUIXSINKS_KILL_SINK_ID")
    frames = dict.fromkeys(sinks, df)
    if os.environ.get("QUIXSINKS_KILL_DEAD_LETTERS"):
        kafka = stream_from(spark, __import__("pathlib").Path(args.input + "-kafka"), KAFKA_SCHEMA)
        kafka = kafka_shaped(kafka.withColumnRenamed("timestamp", "ts"))
        os.makedirs(args.out_dir + "-dead", exist_ok=True)  # sinks create only the last level
        for name, (fmt, options) in json.loads(os.environ["QUIXSINKS_KILL_DEAD_LETTERS"]).items():
            dead = os.path.join(args.out_dir + "-dead", name)
            sinks[name] = (fmt, {**options, "on_error": "dead_letter", "dead_letter_path": dead})
            frames[name] = kafka
    for name, (fmt, options) in sinks.items():
        if sink_id:
            options = {**options, "sink_id": sink_id}
        writer = (
            frames[name]
            .writeStream.format(fmt)
            .option("checkpointLocation", os.path.join(args.checkpoints, name))
        )
        for key, value in options.items():
            writer = writer.option(key, value)
        writer = (
            writer.trigger(availableNow=True)
            if args.available_now
            else writer.trigger(processingTime="100 milliseconds")
        )
        queries.append(writer.start())
    print("started", flush=True)
    for query in queries:
        query.awaitTermination()
        if query.exception() is not None:
            raise SystemExit(f"query failed: {query.exception()}")
    print("finished", flush=True)


if __name__ == "__main__":
    main()
