"""quixsinks demo: stream sensor readings from Spark's embedded rate source into two sinks.

Runs with no external server: a local Spark session reads the built-in
``rate-micro-batch`` source (a fixed number of rows per micro-batch) one micro-batch per
run, restarting from the checkpoint each time, shapes the rows
as Quix-style records (key, timestamp, value columns) and writes them, exactly once,
into a CSV file (``csvfile``) and a directory of Parquet files (``file``). Then it
reads both outputs back and prints where they are and how many rows arrived.

    make demo                                   # or: python examples/streaming_demo.py
    python examples/streaming_demo.py --batches 10 --rows-per-batch 5000
"""

from __future__ import annotations

import argparse
import csv
import os
import shutil

import pyarrow.parquet as pq

import quixsinks
from quixsinks.spark.session import local_session


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", default="demo-output", help="folder for every output")
    parser.add_argument("--batches", type=int, default=5, help="micro-batches to write")
    parser.add_argument("--rows-per-batch", type=int, default=2000)
    args = parser.parse_args()

    out = os.path.abspath(args.output)
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    csv_path = os.path.join(out, "readings.csv")
    parquet_dir = os.path.join(out, "readings-parquet")

    spark = local_session("quixsinks-demo")
    print("registered sinks:", ", ".join(quixsinks.register(spark)))

    readings = (
        spark.readStream.format("rate-micro-batch")
        .option("rowsPerBatch", args.rows_per_batch)
        .load()
        .selectExpr(
            "concat('sensor-', cast(value % 5 as string)) AS key",
            "timestamp",
            "value AS reading_id",
            "round(20 + 5 * sin(value / 100.0), 3) AS temperature",
            "value % 7 = 0 AS alarm",
        )
    )
    # Each availableNow run takes one micro-batch from the source and stops; the next
    # run resumes from the checkpoint, as a restarted production job would.
    sinks = {
        "csvfile": {"path": csv_path},
        "file": {"path": parquet_dir, "format": "parquet"},
    }
    for run in range(args.batches):
        for name, options in sinks.items():
            writer = readings.writeStream.format(name).option(
                "checkpointLocation", os.path.join(out, "_checkpoints", name)
            )
            for key, value in options.items():
                writer = writer.option(key, value)
            query = writer.trigger(availableNow=True).start()
            query.awaitTermination()
            if query.exception() is not None:
                raise SystemExit(f"{name} query failed in run {run}: {query.exception()}")

    with open(csv_path, newline="", encoding="utf-8") as f:
        csv_rows = sum(1 for _ in csv.DictReader(f))
    parquet_files = sorted(p for p in os.listdir(parquet_dir) if p.endswith(".parquet"))
    parquet_rows = sum(
        pq.read_metadata(os.path.join(parquet_dir, p)).num_rows for p in parquet_files
    )
    print()
    print(f"csvfile -> {csv_path}: {csv_rows} rows")
    print(f"file    -> {parquet_dir}: {parquet_rows} rows in {len(parquet_files)} Parquet files")
    expected = args.batches * args.rows_per_batch
    ok = csv_rows == parquet_rows == expected
    print(f"expected {expected} rows in each: {'OK' if ok else 'MISMATCH'}")
    if not ok:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
