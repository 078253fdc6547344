"""One PNG bar chart per benchmark result: rows/s of every case, the floor and the peers.

    python benchmarks/harness/plot.py [RESULTS_DIR [IMAGES_DIR]]
    # defaults: benchmarks/results and docs/img/benchmarks

Reads every ``<name>.json`` that ``harness.results.write_results`` wrote and writes
``<IMAGES_DIR>/<name>.png``: one horizontal bar per case (best of the timed runs),
quixsinks' own cases in one colour, the floor (the Arrow transfer alone) in grey and
peers (Spark's writers, Quix Streams, the destination's own tools) in another, with the
machine and the date in the title. A result with a ``commit_curve`` (the Iceberg
benchmark's commit time per micro-batch, with and without expiry) also gets
``<IMAGES_DIR>/<name>_commit_curve.png``, one line per run; one with a ``history_curve``
(the latency benchmark's time per micro-batch of each sink's long query) gets
``<IMAGES_DIR>/<name>_history.png``, one line per sink. ``make bench`` runs it after
the benchmarks; docs/benchmarks.md embeds the images.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # no display: files only

import matplotlib.pyplot as plt
from matplotlib.ticker import StrMethodFormatter

BENCH_DIR = Path(__file__).resolve().parents[1]
RESULTS = BENCH_DIR / "results"
IMAGES = BENCH_DIR.parent / "docs" / "img" / "benchmarks"

#: Case-name prefixes of quixsinks' own sinks; everything else but the floor is a peer.
OURS = (
    "sink",
    "file",
    "csvfile",
    "influxdb3",
    "influxdb1",
    "lp-",
    "postgresql",
    "redis",
    "iceberg",
    "kinesis",
    "pubsub",
    "bigquery",
    "tsdatalake",
    "mqtt",
)
COLOURS = {"floor": "#9e9e9e", "ours": "#1f77b4", "peer": "#ff7f0e"}
LEGEND = {"ours": "quixsinks", "floor": "floor (Arrow transfer only)", "peer": "peer"}


def kind(name: str, floor: str) -> str:
    """``floor``, ``ours`` or ``peer`` for a case name."""
    if name == floor:
        return "floor"
    return "ours" if name.startswith(OURS) else "peer"


XLABEL = "rows/s (best of the timed runs; higher is better)"


def _dotted(case: dict[str, Any], path: str) -> float:
    value: Any = case
    for part in path.split("."):
        value = value[part]
    return float(value)


def plot(document: dict[str, Any], out: Path) -> Path:
    """Draw one benchmark document (the JSON of ``write_results``) into ``out``."""
    floor = document.get("floor", "")
    # a case is named by its key (measure pages need not repeat it as "name")
    cases = [{"name": k, **c} for k, c in document["cases"].items() if c.get("rows_per_s")]
    names = [c["name"] for c in cases]
    # a page may plot another number than rows/s: "bars": {"value": "large.peak_rss_mb",
    # "label": "..."} (a dotted path into each case)
    bars_spec = document.get("bars") or {"value": "rows_per_s", "label": XLABEL}
    rates = [_dotted(c, bars_spec["value"]) for c in cases]
    colours = [COLOURS[kind(n, floor)] for n in names]
    machine = document.get("machine", {})
    fig, ax = plt.subplots(figsize=(8, 0.45 * len(cases) + 2.0))
    bars = ax.barh(names, rates, color=colours)
    ax.invert_yaxis()  # the first case (the floor) on top, as in the tables
    ax.bar_label(bars, labels=[f"{r:,.0f}" for r in rates], padding=3, fontsize=8)
    ax.set_xlabel(bars_spec["label"])
    ax.set_xlim(0, max(rates) * 1.25)
    ax.xaxis.set_major_formatter(StrMethodFormatter("{x:,.0f}"))
    rows = machine.get("rows")
    subtitle = ", ".join(
        str(part)
        for part in (
            f"{rows:,} rows" if isinstance(rows, int) else None,
            machine.get("spark_master"),
            f"{machine.get('host_cores')} host cores" if machine.get("host_cores") else None,
            f"PySpark {machine.get('pyspark')}" if machine.get("pyspark") else None,
            str(machine.get("date", ""))[:10] or None,
        )
        if part
    )
    ax.set_title(f"{document.get('benchmark', out.stem)}\n{subtitle}", fontsize=10)
    present = [k for k in ("ours", "floor", "peer") if any(kind(n, floor) == k for n in names)]
    handles = [plt.Rectangle((0, 0), 1, 1, color=COLOURS[k]) for k in present]
    labels = [LEGEND[k] for k in present]
    ax.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=3, fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out


def plot_curve(document: dict[str, Any], out: Path) -> Path:
    """Commit time per micro-batch of every run of a ``commit_curve`` (milliseconds)."""
    curves = document["commit_curve"]["seconds"]
    fig, ax = plt.subplots(figsize=(8, 4))
    for label, seconds in curves.items():
        ax.plot(range(1, len(seconds) + 1), [1000 * s for s in seconds], label=label, lw=0.8)
    ax.set_xlabel("micro-batch")
    ax.set_ylabel("commit time (ms)")
    ax.set_ylim(bottom=0)
    date = str(document.get("machine", {}).get("date", ""))[:10]
    ax.set_title(f"{document.get('benchmark', out.stem)}: commit time per micro-batch {date}",
                 fontsize=10)  # fmt: skip
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out


def plot_history(document: dict[str, Any], out: Path) -> Path:
    """Time per micro-batch against batch number, one line per sink (a ``history_curve``:
    ``{"ms": {sink: [ms per batch]}}``), each smoothed by a running median of 9 batches."""
    import statistics

    curves = document["history_curve"]["ms"]
    fig, ax = plt.subplots(figsize=(9, 5))
    for label, ms in curves.items():
        smooth = [statistics.median(ms[max(0, i - 4) : i + 5]) for i in range(len(ms))]
        floor = label == document.get("floor")
        ax.plot(range(1, len(ms) + 1), smooth, label=label, lw=1.6 if floor else 0.9,
                color="black" if floor else None)  # fmt: skip
    ax.set_xlabel("micro-batch")
    ax.set_ylabel("triggerExecution (ms, running median of 9)")
    ax.set_ylim(bottom=0)
    date = str(document.get("machine", {}).get("date", ""))[:10]
    ax.set_title(f"{document.get('benchmark', out.stem)}: time per 100-row micro-batch {date}",
                 fontsize=10)  # fmt: skip
    ax.legend(fontsize=8, ncol=2)
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out


def plot_all(results: Path = RESULTS, images: Path = IMAGES) -> list[Path]:
    """``images/<name>.png`` for every result JSON in ``results``; returns the files."""
    images.mkdir(parents=True, exist_ok=True)
    written = []
    for path in sorted(results.glob("*.json")):
        document = json.loads(path.read_text())
        if isinstance(document, dict) and isinstance(document.get("cases"), dict):
            written.append(plot(document, images / f"{path.stem}.png"))
            if isinstance(document.get("commit_curve", {}).get("seconds"), dict):
                written.append(plot_curve(document, images / f"{path.stem}_commit_curve.png"))
            if isinstance(document.get("history_curve", {}).get("ms"), dict):
                written.append(plot_history(document, images / f"{path.stem}_history.png"))
    return written


if __name__ == "__main__":
    paths = [Path(arg) for arg in sys.argv[1:3]]
    for written in plot_all(*paths):
        print(written)
