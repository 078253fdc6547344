"""Arguments every benchmark takes, and ``--quick``."""

from __future__ import annotations

import argparse
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parents[1]
DEFAULT_OUT = BENCH_DIR / "results"
#: rows of a ``--quick`` run, whatever the page's default
QUICK_ROWS = 1_000


class _Parser(argparse.ArgumentParser):
    """Turns ``--quick`` into a smoke run: :data:`QUICK_ROWS` rows, one run per case
    (the warm-up, which checks the rows), results in a temporary folder (the committed
    ones stay). The numbers of a quick run are not judged."""

    def parse_args(self, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        parsed = super().parse_args(*args, **kwargs)
        if parsed.quick:
            parsed.rows = min(parsed.rows, QUICK_ROWS)
            parsed.repeat = 0  # the warm-up run (which checks the rows) is the only run
            if parsed.out == DEFAULT_OUT:
                parsed.out = Path(tempfile.mkdtemp(prefix="quixsinks-bench-quick-"))
        parsed.partitions = parsed.partitions or parsed.cores
        return parsed


def parse(
    description: str,
    argv: list[str] | None,
    *,
    rows: int,
    repeat: int,
    more: Callable[[argparse.ArgumentParser], None] | None = None,
) -> argparse.Namespace:
    """The arguments of a benchmark: the common ones, plus ``more(parser)`` adds its own."""
    parser = _Parser(description=description)
    parser.add_argument(
        "--quick",
        action="store_true",
        help=f"smoke run: {QUICK_ROWS:_} rows, one run per case, results to a temp folder",
    )
    parser.add_argument("--rows", type=int, default=rows, help=f"rows to write (default {rows:_})")
    parser.add_argument(
        "--runs",
        "--repeat",
        dest="repeat",
        type=int,
        default=repeat,
        help=f"timed runs per case after one warm-up run; the best counts (default {repeat})",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=DEFAULT_OUT,
        help="folder for <name>.json and <name>.md (default benchmarks/results)",
    )
    parser.add_argument("--cores", type=int, default=2, help="local[N] (default 2)")
    parser.add_argument(
        "--partitions", type=int, default=None, help="partitions of the input (default: --cores)"
    )
    parser.add_argument(
        "--cases",
        default=None,
        help="comma-separated case names to run (default: all); the floor case always runs",
    )
    parser.add_argument(
        "--tmp", type=Path, default=None, help="folder for outputs (default: a fresh temp folder)"
    )
    parser.add_argument(
        "--quix-rows",
        type=int,
        default=None,
        help="rows to time a row-by-row peer (Quix Streams) on (default: all rows if a probe "
        "says they take at most a minute, else a sample)",
    )
    parser.add_argument(
        "--strict", action="store_true", help="exit with status 1 when a case misses its target"
    )
    parser.add_argument(
        "--verbose",
        action="store_true",
        help="keep quixsinks' per-batch INFO lines and Spark's progress bar",
    )
    if more is not None:
        more(parser)
    return parser.parse_args(argv)
