"""Where the time goes in quixsinks' serialisers, without Spark.

Builds the foundation benchmark's six columns as a pyarrow table shaped like what Spark
hands a task (``--rows`` rows in record batches of 10,000), then times, single-threaded:

* each ``Format.serialize`` (json, csv, parquet) and each sink's ``write`` into a temp
  folder (``FileSink`` json/parquet, ``CSVFileSink``),
* the building blocks of the JSON and CSV encoders (``json_column`` per column,
  ``json_objects``, ``join_lines``, ``pyarrow.csv.write_csv``),

and, with ``--profile NAME``, prints cProfile's top functions for one of them.

    .venv/bin/python benchmarks/profile_formats.py --rows 100000
    .venv/bin/python benchmarks/profile_formats.py --rows 1000000 --profile json
"""

from __future__ import annotations

import argparse
import cProfile
import functools
import hashlib
import io
import pstats
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pa_csv

from quixsinks.core.arrow import join_lines
from quixsinks.core.batch import SinkBatch, WriteContext
from quixsinks.core.formats import CSVFormat, JSONFormat, ParquetFormat, json_column, json_objects
from quixsinks.core.records import RecordSchema
from quixsinks.sinks.csvfile import CSVFileOptions, CSVFileSink
from quixsinks.sinks.file import FileOptions, FileSink

SPARK_BATCH_ROWS = 10_000  # spark.sql.execution.arrow.maxRecordsPerBatch


def mixed_table(rows: int) -> pa.Table:
    """The benchmark's columns with Spark's Arrow types, in 10,000-row record batches."""
    ids = pa.array(range(rows), pa.int64())
    key = pc.binary_join_element_wise("k", pc.cast(pc.remainder(ids, 1000), pa.string()), "")
    names = pa.array([hashlib.md5(str(i).encode()).hexdigest()[:12] for i in range(rows)])
    table = pa.table(
        {
            "key": key,
            "id": ids,
            "value": pc.divide(pc.cast(ids, pa.float64()), 7.0),
            "flag": pc.equal(pc.remainder(ids, 2), 0),
            "name": names,
            "timestamp": pc.cast(
                pc.multiply(pc.add(ids, 1_700_000_000), 1_000_000), pa.timestamp("us", "UTC")
            ),
        }
    )
    return pa.Table.from_batches(table.to_batches(max_chunksize=SPARK_BATCH_ROWS))


def fresh_batch(table: pa.Table) -> SinkBatch:
    """A new SinkBatch (its cached value table is per batch)."""
    records = RecordSchema.resolve(table.schema)
    return SinkBatch(table, records, WriteContext("bench", 0, 0, "0-0-bench"))


def cases(table: pa.Table, folder: str) -> dict[str, Callable[[], Any]]:
    file_opts = {
        fmt: FileOptions.from_options({"path": f"{folder}/{fmt}", "format": fmt})
        for fmt in ("json", "parquet", "csv")
    }
    file_sinks = {}
    for fmt, options in file_opts.items():
        sink = FileSink(options)
        sink.prepare(table.schema)
        file_sinks[fmt] = sink
    csv_sink = CSVFileSink(CSVFileOptions.from_options({"path": f"{folder}/out.csv"}))
    csv_sink.prepare(table.schema)

    values = fresh_batch(table).values()
    combined = {name: table.column(name).combine_chunks() for name in table.column_names}

    def json_lines() -> pa.Array:
        batch = fresh_batch(table)
        return pc.binary_join_element_wise(
            '{"_timestamp":',
            json_column(batch.timestamps_ms()),
            ',"_key":',
            json_column(batch.keys()),
            ',"_value":',
            json_objects(batch.values()),
            "}",
            "",
        )

    prepared_lines = json_lines()
    csv_table = CSVFormat().table(fresh_batch(table))

    def write_csv() -> bytes:
        out = pa.BufferOutputStream()
        pa_csv.write_csv(
            csv_table, out, write_options=pa_csv.WriteOptions(include_header=False, eol="\r\n")
        )
        return bytes(out.getvalue().to_pybytes())

    found: dict[str, Callable[[], Any]] = {
        "json": lambda: JSONFormat().serialize(fresh_batch(table)),
        "csv": lambda: CSVFormat().serialize(fresh_batch(table)),
        "parquet": lambda: ParquetFormat().serialize(fresh_batch(table)),
        "sink-file-json": lambda: file_sinks["json"].write(fresh_batch(table)),
        "sink-file-parquet": lambda: file_sinks["parquet"].write(fresh_batch(table)),
        "sink-csvfile": lambda: csv_sink.write(fresh_batch(table)),
        "part-json_objects(values)": lambda: json_objects(values),
        "part-json-lines(all)": json_lines,
        "part-join_lines": lambda: join_lines(prepared_lines).to_pybytes(),
        "part-csv.table": lambda: CSVFormat().table(fresh_batch(table)),
        "part-write_csv": write_csv,
    }
    for name, column in combined.items():
        found[f"part-json_column({name})"] = functools.partial(json_column, column)
    return found


def best_of(fn: Callable[[], Any], repeat: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return min(times)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--profile", default=None, help="case to run under cProfile")
    parser.add_argument("--top", type=int, default=25, help="functions to print")
    args = parser.parse_args(argv)

    table = mixed_table(args.rows)
    with tempfile.TemporaryDirectory(prefix="quixsinks-profile-") as folder:
        found = cases(table, folder)
        if args.profile:
            fn = found[args.profile]
            fn()
            profiler = cProfile.Profile()
            profiler.enable()
            for _ in range(args.repeat):
                fn()
            profiler.disable()
            stream = io.StringIO()
            stats = pstats.Stats(profiler, stream=stream)
            stats.sort_stats("tottime").print_stats(args.top)
            print(stream.getvalue())
            return 0
        print(f"{args.rows:_} rows, best of {args.repeat}, single thread")
        print(f"{'case':<32} {'seconds':>9} {'rows/s':>14}")
        for name, fn in found.items():
            seconds = best_of(fn, args.repeat)
            print(f"{name:<32} {seconds:9.4f} {args.rows / seconds:14,.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
