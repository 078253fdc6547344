"""A new Spark session for the auto-discovery tests: what works without any register call.

    python discovery_job.py SCENARIO IN OUT

Each check runs in order and its outcome ("ok" or the error text) goes into one JSON line
on stdout, so the test can assert each behaviour on its own:

  auto       no register call: batch writes into `file` and `csvfile`, a stream into
             `file`; then quixsinks.register(spark) on top of the auto-registered sinks,
             a write after it, and spark.dataSource.register of a user's own DataSource
  missing    (run with psycopg2 and influxdb_client_3 blocked) `file` by name still
             works; `postgresql` and `influxdb3` by name fail with the extra to install
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceWriter, WriterCommitMessage
from streams import INPUT_SCHEMA, run_available_now

from quixsinks.spark.session import local_session


class MarkerDataSource(DataSource):
    """A user's own minimal data source: each task drops a file with its row count."""

    @classmethod
    def name(cls) -> str:
        return "user_marker"

    def writer(self, schema: Any, overwrite: bool) -> DataSourceWriter:
        return MarkerWriter(self.options["path"])


class MarkerWriter(DataSourceWriter):
    def __init__(self, path: str) -> None:
        self.path = path

    def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
        from pyspark import TaskContext

        rows = sum(1 for _ in iterator)
        partition = TaskContext.get().partitionId()
        with open(os.path.join(self.path, f"part-{partition}.count"), "w") as f:
            f.write(str(rows))
        return WriterCommitMessage()


def main() -> None:
    scenario, input_dir, out = sys.argv[1:]
    spark = local_session("quixsinks-discovery-test")
    out_dir = Path(out)
    batch = spark.read.schema(INPUT_SCHEMA).json(input_dir)
    results: dict[str, str] = {}

    def check(name: str, action: Callable[[], object]) -> None:
        try:
            action()
            results[name] = "ok"
        except Exception as exc:
            results[name] = f"{type(exc).__name__}: {exc}"

    def save(fmt: str, path: Path) -> None:
        batch.write.format(fmt).option("path", str(path)).mode("append").save()

    if scenario == "auto":
        check("batch_file", lambda: save("file", out_dir / "batch"))
        check("batch_csvfile", lambda: save("csvfile", out_dir / "batch.csv"))
        check("batch_qs_file", lambda: save("qs_file", out_dir / "alias"))
        stream_options = {"path": str(out_dir / "stream")}
        check(
            "stream_file",
            lambda: run_available_now(
                spark, Path(input_dir), "file", out_dir / "ck", stream_options
            ),
        )
        registered: list[str] = []

        def register() -> None:
            import quixsinks

            registered.extend(quixsinks.register(spark))

        # Spark's warnings on, so that the test sees any ("replaced a statically
        # registered data source" for each name register would register again)
        spark.sparkContext.setLogLevel("WARN")
        print("--- register ---", file=sys.stderr, flush=True)
        check("register", register)
        print("--- registered ---", file=sys.stderr, flush=True)
        spark.sparkContext.setLogLevel("ERROR")
        results["registered"] = ",".join(sorted(registered))
        check("file_after_register", lambda: save("file", out_dir / "after"))
        (out_dir / "marker").mkdir()
        check("user_register", lambda: spark.dataSource.register(MarkerDataSource))
        check("user_write", lambda: save("user_marker", out_dir / "marker"))
    elif scenario == "missing":
        check("file", lambda: save("file", out_dir / "batch"))
        check("postgresql", lambda: save("postgresql", out_dir / "pg"))
        check("influxdb3", lambda: save("influxdb3", out_dir / "influx"))
    else:
        raise SystemExit(f"unknown scenario {scenario!r}")
    print(json.dumps(results), flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
