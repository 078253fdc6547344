"""``make chaos``: run the whole fault matrix, write tests/chaos/results.json and
docs/reliability.md.

    python -m tests.chaos [--only SUBSTRING] [--fault NAME] [--quick]

Servers (PostgreSQL...) are started here on 127.0.0.1 and stopped at the end.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import quixsinks
from quixsinks.spark.session import local_session

from . import report
from .faults import FAULTS, CellResult, run_cell
from .matrix import QUICK, targets
from .workload import MASTER


def environment(servers: dict[str, str]) -> dict[str, str]:
    import pyarrow
    import pyspark

    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
    ).stdout.strip()
    return {
        "date": dt.date.today().isoformat(),
        "version": quixsinks.__version__,
        "commit": commit or "unknown",
        "pyspark": pyspark.__version__,
        "pyarrow": pyarrow.__version__,
        "servers": ", ".join(f"{k} {v}" for k, v in servers.items()),
    }


def _order(rows: list[Any]) -> Any:
    """Sort key of a cell: the matrix's row order, then its fault order."""
    names = [t.name for t in rows]
    faults = list(FAULTS)

    def key(cell: dict[str, Any]) -> tuple[int, int]:
        target = names.index(cell["target"]) if cell["target"] in names else len(names)
        return target, faults.index(cell["fault"])

    return key


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--only", help="run the targets whose name contains this")
    parser.add_argument("--fault", choices=sorted(FAULTS), action="append")
    parser.add_argument("--quick", action="store_true", help="only the cells CI runs")
    args = parser.parse_args(argv)

    spark = local_session("quixsinks-chaos", **{"spark.master": MASTER})
    quixsinks.register(spark)
    results: list[CellResult] = []
    with contextlib.ExitStack() as stack, tempfile.TemporaryDirectory() as tmp:
        servers, rows = targets(stack)
        for target in rows:
            if args.only and args.only not in target.name:
                continue
            for fault in FAULTS.values():
                if args.fault and fault.name not in args.fault:
                    continue
                if args.quick and (target.name, fault.name) not in QUICK:
                    continue
                # a folder per cell: the sinks' per-process preflight cache remembers paths
                workdir = Path(tmp) / f"cell{len(results):03d}"
                result = run_cell(spark, target, fault, workdir)
                print(f"{target.name:28} {fault.name:14} {result.verdict} "
                      f"({result.lost} lost, {result.duplicated} dup, {result.seconds} s)",
                      flush=True)  # fmt: skip
                results.append(result)
        env = environment(servers)
    spark.stop()
    cells = [{**r.to_json(), "commit": env["commit"]} for r in results]
    if (args.only or args.fault or args.quick) and report.RESULTS.exists():
        # a partial run replaces its cells in the last run's results, keeping the others
        last = report.load()
        ran = {(c["target"], c["fault"]) for c in cells}
        kept = [c for c in last["cells"] if (c["target"], c["fault"]) not in ran]
        cells = sorted(kept + cells, key=_order(rows))
        # the kept cells were measured earlier: the page names every day
        dates = dict.fromkeys([*last["environment"]["date"].split(", "), env["date"]])
        env = {**env, "date": ", ".join(dates)}
    data: dict[str, Any] = {"environment": env, "quick": sorted(QUICK), "cells": cells}
    report.RESULTS.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    report.write()
    violations = [r for r in results if not r.ok]
    for r in violations:
        print(f"VIOLATION {r.target} / {r.fault}: {r.verdict}", file=sys.stderr)
    return 1 if violations else 0


if __name__ == "__main__":
    raise SystemExit(main())
