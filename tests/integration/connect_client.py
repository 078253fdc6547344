"""A Spark Connect client for the Connect tests: one scenario per run.

    python connect_client.py URL SCENARIO IN OUT

Scenarios:
  register   quixsinks.register(spark) (prints the registered names as JSON), then a
             batch write of IN into `file` and `csvfile` and an availableNow stream of IN
             into `file` and `csvfile`
  by-name    no register call and no quixsinks on the client (run it with quixsinks
             blocked): a batch write into `file` and `csvfile` and a stream into `file`
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from pyspark.sql import SparkSession
from streams import INPUT_SCHEMA, run_available_now


def main() -> None:
    url, scenario, input_dir, out = sys.argv[1:]
    spark = SparkSession.builder.remote(url).getOrCreate()
    inp, out_dir = Path(input_dir), Path(out)
    try:
        if scenario == "register":
            import quixsinks

            print(json.dumps(quixsinks.register(spark)), flush=True)
        batch = spark.read.schema(INPUT_SCHEMA).json(input_dir)
        batch.write.format("file").option("path", str(out_dir / "batch")).mode("append").save()
        csv_path = str(out_dir / "batch.csv")
        batch.write.format("csvfile").option("path", csv_path).mode("append").save()
        options = {"path": str(out_dir / "stream")}
        run_available_now(spark, inp, "file", out_dir / "ck-file", options)
        if scenario == "register":
            options = {"path": str(out_dir / "stream.csv")}
            run_available_now(spark, inp, "csvfile", out_dir / "ck-csv", options)
    finally:
        spark.stop()


if __name__ == "__main__":
    main()
