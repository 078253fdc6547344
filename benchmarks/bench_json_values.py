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
import sys
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="20,000 rows, one round")
    parser.add_argument("--out", type=Path, default=RESULTS, help="where the results go")
    parser.add_argument("--cores", type=int, default=None, help="ignored: one process")
    args = parser.parse_args(argv)
    if args.quick:
        args.rows, args.rounds = 20_000, 1
    tables = batches(args.rows)
    best = dict.fromkeys(CASES, float("inf"))
    for _ in range(args.rounds):
        for name, case in CASES.items():  # interleaved: each round runs every case once
            start = time.perf_counter()
            assert sum(case(t) for t in tables) == args.rows
            best[name] = min(best[name], time.perf_counter() - start)
    base = args.rows / best["rebuilt"]
    cases = {
        name: {
            "seconds": round(s, 4),
            "rows_per_s": round(args.rows / s),
            "ratio": round(args.rows / s / base, 2),
        }
        for name, s in best.items()
    }
    args.out.mkdir(parents=True, exist_ok=True)
    meta = {"rows": args.rows, "rounds": args.rounds, "python": platform.python_version()}
    document = {"benchmark": "json_values", "machine": meta, "floor": "rebuilt", "cases": cases}
    (args.out / "json_values.json").write_text(json.dumps(document, indent=2) + "\n")
    lines = [
        "# JSON values out: passthrough against rebuilt",
        "",
        f"{args.rows:,} Kafka JSON values in batches of {BATCH:,}, best of {args.rounds} "
        "interleaved rounds, one process, no Spark (benchmarks/bench_json_values.py).",
        "",
        "| case | rows/s | ratio to rebuilt |",
        "|---|---|---|",
        *(f"| {n} | {r['rows_per_s']:,} | {r['ratio']} |" for n, r in cases.items()),
        "",
    ]
    (args.out / "json_values.md").write_text("\n".join(lines))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
