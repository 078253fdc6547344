"""Dedupe-id memory benchmark: a task's RSS while its rows get dedupe ids, old vs new.

The ``kinesis`` and ``pubsub`` sinks give every record a dedupe id
(``quixsinks.core.delivery.DedupeIds``). A task makes one ``DedupeIds`` and asks it for
the ids of each SinkBatch in turn; this benchmark does the same, without Spark or an
emulator: ``--rows`` rows (default 10 million, one task's partition) in chunks of
``--chunk`` payloads (default 100,000, about a SinkBatch), each payload a small JSON object
(the size of a Kinesis record's content here, about 60 bytes), distinct per row. The
chunk's payloads and ids are dropped after each chunk, as the sinks drop them once sent.

Cases, each in a fresh Python process of its own (so that one case's memory cannot hide
in another's), its resident set size (``VmRSS``) read at a tenth, a fifth, half and all of
the rows:

* ``content-occurrence``: the scheme quixsinks used before (reimplemented here as it
  was): a hash of sink id, batch, scope, the payload's content digest and its occurrence
  among identical payloads, which meant a dict entry per distinct payload for the task;
* ``position``: ``DedupeIds.ids(payloads)``, the rows without Kafka coordinates;
* ``kafka``: ``DedupeIds.ids(payloads, coordinates)``, the rows of a Kafka source (one
  topic, four partitions, offsets increasing).

``rows_per_s`` is the ids' throughput (payloads and coordinates built outside the
timing). The baseline of the ratios is ``content-occurrence``.

Run: ``.venv/bin/python benchmarks/bench_dedupe_memory.py [--rows N] [--chunk N] [--quick]``.
"""

from __future__ import annotations

import argparse
import array
import hashlib
import json
import os
import resource
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from harness import Bench, Page, machine_info, write_measured

TITLE = "quixsinks dedupe ids: a task's memory, old vs new"
BASELINE = "content-occurrence"
CASES = (BASELINE, "position", "kafka")
#: where RSS is read, as fractions of --rows (1M, 2M, 5M, 10M by default)
CHECKPOINTS = (0.1, 0.2, 0.5, 1.0)
KAFKA_PARTITIONS = 4


class ContentOccurrenceIds:
    """The previous ``DedupeIds`` (before bounded state), as it was: the baseline."""

    def __init__(self, sink_id: str, batch_id: int, scope: str | int, digest_size: int = 16):
        self._prefix = f"{sink_id}\x00{batch_id}\x00{scope}\x00".encode()
        self._digest_size = digest_size
        self._seen: dict[bytes, int] = {}

    def ids(self, payloads: Sequence[bytes]) -> list[str]:
        prefix, size, seen = self._prefix, self._digest_size, self._seen
        out: list[str] = []
        for payload in payloads:
            content = hashlib.blake2b(payload, digest_size=16).digest()
            occurrence = seen.get(content, 0)
            seen[content] = occurrence + 1
            key = prefix + content + occurrence.to_bytes(8, "big")
            out.append(hashlib.blake2b(key, digest_size=size).hexdigest())
        return out


def rss_mb() -> float:
    """This process's resident set size now (VmRSS), or its peak where /proc is missing."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (1024 * 1024) if sys.platform == "darwin" else peak / 1024


def payloads(first: int, count: int) -> list[bytes]:
    return [
        b'{"id":%d,"sensor":"s%d","temp":%d.25,"ok":true}\x00s%d' % (i, i % 997, i % 50, i % 997)
        for i in range(first, first + count)
    ]


def coordinates(first: int, count: int) -> list[tuple[str, int, int]]:
    """Kafka coordinates of rows ``first..``: one topic, offsets increasing per partition."""
    return [
        ("events", i % KAFKA_PARTITIONS, i // KAFKA_PARTITIONS) for i in range(first, first + count)
    ]


def id_function(case: str) -> Callable[[list[bytes], Any], list[str]]:
    """``ids(payloads, coordinates)`` of one case, for one task."""
    if case == BASELINE:
        old = ContentOccurrenceIds("bench-sink", 7, 0)
        return lambda chunk, where: old.ids(chunk)
    from quixsinks.core.delivery import DedupeIds

    new = DedupeIds("bench-sink", 7, 0)
    return new.ids


def run_child(case: str, rows: int, chunk: int) -> dict[str, Any]:
    """One case in this process: RSS at the checkpoints, seconds spent in ids()."""
    kafka = case == "kafka"
    ids = id_function(case)
    ids(payloads(0, 10), coordinates(0, 10) if kafka else None)  # imports, first allocations
    ids = id_function(case)
    targets = [int(rows * fraction) for fraction in CHECKPOINTS]
    # readings go into a preallocated array: a Python object kept from the middle of the
    # loop would pin a 1 MiB pymalloc arena of the chunks' freed objects (+1 MB a reading)
    readings = array.array("d", [0.0] * len(targets))
    start_rss = rss_mb()
    seconds = 0.0
    done = 0
    for k, target in enumerate(targets):
        while done < target:
            n = min(chunk, target - done)
            batch = payloads(done, n)
            where = coordinates(done, n) if kafka else None
            started = time.perf_counter()
            out = ids(batch, where)
            seconds += time.perf_counter() - started
            assert len(out) == n
            del batch, where, out
            done += n
        readings[k] = rss_mb()
    rss = {str(t): round(r, 1) for t, r in zip(targets, readings, strict=True)}
    return {"start_rss_mb": round(start_rss, 1), "rss_mb": rss, "seconds": round(seconds, 6)}


def child(case: str, rows: int, chunk: int) -> None:
    """The child process of :func:`measure_case`: one case, what it measured as JSON."""
    print(json.dumps(run_child(case, rows, chunk)))


def measure_case(case: str, rows: int, chunk: int) -> dict[str, Any]:
    """Run ``case`` in a fresh interpreter and return what it measured."""
    here = Path(__file__).resolve()
    script = (
        f"import sys; sys.path.insert(0, {str(here.parent)!r}); "
        f"import {here.stem}; {here.stem}.child({case!r}, {rows}, {chunk})"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        check=False,
        env=os.environ,
        timeout=3600,
    )
    if done.returncode != 0:
        raise RuntimeError(f"{case}: exit {done.returncode}\n{done.stderr[-3000:]}")
    result: dict[str, Any] = {"name": case, **json.loads(done.stdout.strip().splitlines()[-1])}
    result["rows_per_s"] = round(rows / result["seconds"]) if result["seconds"] else 0
    last = result["rss_mb"][str(rows)]
    result["growth_mb"] = round(last - result["start_rss_mb"], 1)
    result["bytes_per_row"] = round(result["growth_mb"] * 1024 * 1024 / rows, 1)
    return result


def markdown(rows: int, chunk: int, cases: dict[str, dict[str, Any]], info: dict[str, Any]) -> str:
    marks = [str(int(rows * f)) for f in CHECKPOINTS]
    head = " | ".join(f"RSS MB at {int(m):_}" for m in marks)
    lines = [
        f"# {TITLE}",
        "",
        f"{rows:_} rows of one task in chunks of {chunk:_}, each case in a fresh Python "
        f"process; Python {info['python']}, pyarrow {info['pyarrow']}, {info['host_cores']} "
        f"host cores; {info['date']}.",
        "",
        f"| case | RSS MB at start | {head} | growth MB | bytes/row | ids/s | vs baseline |",
        "| --- | ---: | " + " | ".join("---:" for _ in marks) + " | ---: | ---: | ---: | ---: |",
    ]
    base = cases[BASELINE]["rows_per_s"] or 1
    for name, r in cases.items():
        values = " | ".join(f"{r['rss_mb'][m]:,.1f}" for m in marks)
        lines.append(
            f"| {name} | {r['start_rss_mb']:,.1f} | {values} | {r['growth_mb']:,.1f} | "
            f"{r['bytes_per_row']:,.1f} | {r['rows_per_s']:,} | {r['rows_per_s'] / base:.2f} |"
        )
    lines += [
        "",
        "`growth MB`: RSS after the last row minus RSS before the first (after imports).",
        f"`{BASELINE}` is the scheme quixsinks used before (a dict entry per distinct "
        "payload for the whole task); `position` and `kafka` are `DedupeIds` now.",
        "",
    ]
    return "\n".join(lines)


def measure(bench: Bench) -> str:
    args = bench.args
    wanted = [c for c in CASES if c in bench.wanted]
    cases = {}
    for case in wanted:
        print(f"{case}: {args.rows:_} rows...", flush=True)
        cases[case] = measure_case(case, args.rows, args.chunk)
    info = machine_info(rows=args.rows, chunk=args.chunk)
    document = {
        "benchmark": PAGE.name,
        "title": TITLE,
        "machine": info,
        "floor": BASELINE,
        "checkpoints": [int(args.rows * f) for f in CHECKPOINTS],
        "cases": cases,
    }
    text = markdown(args.rows, args.chunk, cases, info)
    write_measured(bench, document, text)
    return text


def arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--chunk", type=int, default=100_000, help="payloads per ids() call")


PAGE = Page(
    name="dedupe_memory",
    title=TITLE,
    doc=__doc__ or "",
    case_names=CASES[1:],
    floor=BASELINE,
    rows=10_000_000,
    repeat=1,
    arguments=arguments,
    measure=measure,
)

main = PAGE.main


if __name__ == "__main__":
    sys.exit(main())
