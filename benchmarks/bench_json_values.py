"""JSON values out: the producer's bytes (passthrough) against values rebuilt from columns.

Every sink that writes a Kafka value as JSON text (redis, kinesis, pubsub, mqtt, file JSON,
csvfile) runs one of these per batch. Without Spark, one process, ``--rows`` Kafka-shaped
rows (default 200,000) of small mixed JSON objects in batches of 10,000, cases interleaved
over ``--rounds`` rounds (best round counts):

* ``rebuilt``: the encoder before passthrough: parse into typed columns, then
  ``json_objects`` (what every JSON-writing sink did; the baseline);
* ``passthrough``: the same parse (the glue's check that every row is a JSON object), then
  ``value_json_texts`` (the default now);
* ``json:dumps``: ``value_serializer=json:dumps``: ``SinkBatch.messages`` and
  ``serialize_each`` (Quix's bytes exactly);
* ``quix``: what Quix Streams does per message: ``json.dumps(orjson.loads(value))``.

Results: benchmarks/results/json_values.json and .md (rows/s, ratio to ``rebuilt``).

    .venv/bin/python benchmarks/bench_json_values.py [--rows N] [--rounds R]
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa

from quixsinks.core.arrow import serialize_each
from quixsinks.core.batch import SinkBatch, WriteContext
from quixsinks.core.formats import json_objects, value_json_texts
from quixsinks.core.records import RecordSchema

RESULTS = Path(__file__).resolve().parent / "results"
BATCH = 10_000


def batches(rows: int) -> list[pa.Table]:
    values = [
        json.dumps(
            {"id": i, "sensor": f"s-{i % 97}", "t": 20.0 + (i % 13) / 4, "ok": i % 2 == 0}
            if i % 5
            else {"sensor": f"ü-{i % 7}", "t": i % 40, "tags": ["a", "b"], "o": {"x": 1}}
        ).encode()
        for i in range(rows)
    ]
    out = []
    for start in range(0, rows, BATCH):
        chunk = values[start : start + BATCH]
        n = len(chunk)
        out.append(
            pa.table(
                {
                    "key": pa.array([b"k"] * n, pa.binary()),
                    "value": pa.array(chunk, pa.binary()),
                    "topic": ["bench"] * n,
                    "partition": pa.array([0] * n, pa.int32()),
                    "offset": pa.array(range(start, start + n), pa.int64()),
                    "timestamp": pa.array([0] * n, pa.timestamp("ms", "UTC")),
                    "timestampType": pa.array([0] * n, pa.int32()),
                }
            )
        )
    return out


def fresh(table: pa.Table) -> SinkBatch:
    return SinkBatch(table, RecordSchema.resolve(table.schema), WriteContext("bench", 0))


def rebuilt(table: pa.Table) -> int:
    batch = fresh(table)
    return len(json_objects(batch.values()))


def passthrough(table: pa.Table) -> int:
    batch = fresh(table)
    batch.values()  # the glue's check before any write
    return len(value_json_texts(batch))


def dumps(table: pa.Table) -> int:
    batch = fresh(table)
    batch.values()
    return len(serialize_each(json.dumps, batch.messages(), sink="b", option="value_serializer"))


def quix(table: pa.Table) -> int:
    import orjson

    return len([json.dumps(orjson.loads(v)).encode() for v in table.column("value").to_pylist()])


CASES: dict[str, Callable[[pa.Table], int]] = {
    "rebuilt": rebuilt,
    "passthrough": passthrough,
    "json:dumps": dumps,
    "quix": quix,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    tables = batches(args.rows)
    best = dict.fromkeys(CASES, float("inf"))
    for _ in range(args.rounds):
        for name, case in CASES.items():  # interleaved: each round runs every case once
            start = time.perf_counter()
            assert sum(case(t) for t in tables) == args.rows
            best[name] = min(best[name], time.perf_counter() - start)
    base = args.rows / best["rebuilt"]
    results = {
        name: {"seconds": round(s, 4), "rows_per_s": round(args.rows / s), "ratio": 0.0}
        for name, s in best.items()
    }
    for result in results.values():
        result["ratio"] = round(result["rows_per_s"] / base, 2)
    RESULTS.mkdir(exist_ok=True)
    meta = {"rows": args.rows, "rounds": args.rounds, "python": platform.python_version()}
    (RESULTS / "json_values.json").write_text(
        json.dumps({"meta": meta, "results": results}, indent=2) + "\n"
    )
    lines = [
        "# JSON values out: passthrough against rebuilt",
        "",
        f"{args.rows:,} Kafka JSON values in batches of {BATCH:,}, best of {args.rounds} "
        "interleaved rounds, one process, no Spark (benchmarks/bench_json_values.py).",
        "",
        "| case | rows/s | ratio to rebuilt |",
        "|---|---|---|",
        *(f"| {n} | {r['rows_per_s']:,} | {r['ratio']} |" for n, r in results.items()),
        "",
    ]
    (RESULTS / "json_values.md").write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
