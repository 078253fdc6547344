"""A driver for the standalone-cluster test: streams and a batch write on two executors.

Run as a script with a Spark master URL; it streams the input files (4 partitions a
micro-batch) into `file`, `csvfile` and `postgresql`, then batch-writes the same input into
`file` and `postgresql`, and prints one JSON line with the executors it ran on.

    python cluster_job.py MASTER_URL IN OUT CHECKPOINTS PG_OPTIONS_JSON
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from pyspark.sql import SparkSession
from streams import stream_from

import quixsinks

EXECUTORS = 2


def main() -> None:
    master, input_dir, out, checkpoints, pg_json = sys.argv[1:]
    pg_options = json.loads(pg_json)
    spark = (
        SparkSession.builder.master(master)
        .appName("quixsinks-cluster-test")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.ui.enabled", "false")
        .config("spark.pyspark.python", sys.executable)
        .config("spark.executor.cores", "1")
        .config("spark.cores.max", str(EXECUTORS))
        .config("spark.executor.memory", "512m")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("WARN")
    executors = wait_for_executors(spark, EXECUTORS, timeout=90)
    quixsinks.register(spark)

    out_dir = Path(out)
    sinks = {
        "file": {"path": str(out_dir / "stream")},
        "csvfile": {"path": str(out_dir / "stream.csv")},
        "postgresql": {**pg_options, "table_name": "stream_events"},
    }
    queries = []
    for fmt, options in sinks.items():  # three queries at once, as one job would run them
        writer = (
            stream_from(spark, Path(input_dir))
            .repartition(4)  # tasks on both executors
            .writeStream.format(fmt)
            .option("checkpointLocation", str(Path(checkpoints) / fmt))
            .options(**options)
            .trigger(availableNow=True)
        )
        queries.append(writer.start())
    for query in queries:
        query.awaitTermination(timeout=180)
        if query.isActive:
            raise SystemExit(f"query {query.name} did not finish in 180 s")
        if query.exception() is not None:
            raise SystemExit(f"query failed: {query.exception()}")

    batch = spark.read.schema("id BIGINT, key STRING, name STRING, amount DOUBLE").json(input_dir)
    batch = batch.repartition(4)
    batch.write.format("file").option("path", str(out_dir / "batch")).mode("append").save()
    writer = batch.write.format("postgresql").mode("append")
    for key, value in {**pg_options, "table_name": "batch_events"}.items():
        writer = writer.option(key, value)
    writer.save()
    print(json.dumps({"executors": executors}), flush=True)
    spark.stop()


def wait_for_executors(spark: SparkSession, count: int, timeout: float) -> int:
    """Block until `count` executors registered (the driver is one more block manager)."""
    status = spark.sparkContext._jsc.sc().getExecutorMemoryStatus()
    deadline = time.monotonic() + timeout
    while status.size() - 1 < count:
        if time.monotonic() > deadline:
            raise SystemExit(f"only {status.size() - 1} of {count} executors after {timeout}s")
        time.sleep(0.2)
        status = spark.sparkContext._jsc.sc().getExecutorMemoryStatus()
    return int(status.size()) - 1


if __name__ == "__main__":
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    main()
