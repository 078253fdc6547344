"""Results: where the numbers were taken, and ``<out>/<name>.json`` + ``<out>/<name>.md``.

The JSON document is what docs/benchmarks.md and ``harness/plot.py`` read: ``benchmark``,
``title``, ``machine`` (versions, cores, Spark settings, date, the page's own facts),
``floor``, ``all_targets_passed``, ``cases`` (every :class:`~harness.timing.CaseResult`),
``skipped`` (case -> reason) and ``targets`` (the judged relative targets) when there are
any, plus a page's own entries. The markdown is the table, the setup line and the notes.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import platform
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .timing import CaseResult

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def command_output(command: Sequence[str], *, first_line: bool = True) -> str | None:
    """What ``command`` prints (stdout, else stderr), for version strings; None when it
    cannot run. Bounded by a 30 s timeout."""
    try:
        done = subprocess.run(
            list(command), capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    text = (done.stdout or done.stderr).strip()
    if first_line:
        text = text.splitlines()[0] if text else ""
    return text or None


def _spark_setting(spark: SparkSession, key: str) -> str | None:
    try:
        value = spark.conf.get(key)
    except Exception:  # a setting without a default raises
        value = None
    return value if value is not None else spark.sparkContext.getConf().get(key, None)


def machine_info(spark: SparkSession | None = None, **extra: Any) -> dict[str, Any]:
    """Where and how the numbers were taken (versions, cores, date) plus ``extra``."""
    import pyarrow
    import pyspark

    import quixsinks

    info: dict[str, Any] = {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "host_cores": os.cpu_count(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "processor": platform.processor() or None,
        "python": platform.python_version(),
        "python_executable": sys.executable,
        "pyspark": pyspark.__version__,
        "pyarrow": pyarrow.__version__,
        "java": command_output(["java", "-version"]),
        "quixsinks": quixsinks.__version__,
    }
    if spark is not None:
        info["spark_master"] = spark.sparkContext.master
        info["spark_conf"] = {
            key: _spark_setting(spark, key)
            for key in (
                "spark.driver.memory",
                "spark.sql.execution.arrow.maxRecordsPerBatch",
                "spark.python.worker.reuse",
            )
        }
    info.update(extra)
    return info


def markdown_table(
    results: Sequence[CaseResult],
    *,
    floor: str,
    rows: int | None = None,
    skipped: Mapping[str, str] | None = None,
) -> str:
    """The results as a markdown table: case | best s | rows/s | vs floor | target.

    A case that wrote another number of rows than ``rows`` is labelled with its own;
    ``skipped`` cases (name -> reason) are listed last, with their reason.
    """
    lines = [
        "| case | best s | rows/s | vs floor | target |",
        "| --- | ---: | ---: | ---: | --- |",
    ]
    for r in results:
        label = r.name
        if rows is not None and r.rows is not None and r.rows != rows:
            label = f"{r.name} ({r.rows:,} rows)"
        ratio = "" if r.ratio_to_floor is None else f"{r.ratio_to_floor:.2f}"
        if r.name == floor:
            target = "(floor)"
        elif r.target is None:
            target = ""
        else:
            target = f">= {r.target:.2f} {'pass' if r.passed else 'FAIL'}"
        lines.append(
            f"| {label} | {r.best_seconds:.2f} | {r.rows_per_s:,.0f} | {ratio} | {target} |"
        )
    for name, reason in (skipped or {}).items():
        lines.append(f"| {name} | | | | skipped: {reason.replace('|', '/')} |")
    return "\n".join(lines) + "\n"


def targets_markdown(judged: Sequence[Mapping[str, Any]]) -> str:
    """Judged relative targets (:func:`~harness.timing.judge_targets`) as a markdown table."""
    lines = [
        "| target | rows/s ratio | median per round | result |",
        "| --- | ---: | ---: | --- |",
    ]
    for t in judged:
        goal = f"{t['case']} >= {t['min_ratio']:g}x {t['against']}"
        if t["passed"] is None:
            lines.append(f"| {goal} | | | not measured: {t.get('note', '')} |")
            continue
        result = "pass" if t["passed"] else "FAIL"
        lines.append(f"| {goal} | {t['ratio']:.2f}x | {t['median_round_ratio']:.2f}x | {result} |")
    return "\n".join(lines) + "\n"


def write_results(
    out: Path,
    name: str,
    *,
    title: str,
    info: dict[str, Any],
    results: Sequence[CaseResult],
    floor: str,
    notes: str = "",
    skipped: Mapping[str, str] | None = None,
    extra: Mapping[str, Any] | None = None,
) -> str:
    """Write ``<out>/<name>.json`` and ``<out>/<name>.md``; return the markdown.

    ``skipped`` (case name -> reason) goes into both files; ``extra`` entries are
    added to the JSON document (and replace the standard entries of the same name).
    """
    out.mkdir(parents=True, exist_ok=True)
    targeted = [r for r in results if r.target is not None]
    document = {
        "benchmark": name,
        "title": title,
        "machine": info,
        "floor": floor,
        "all_targets_passed": all(r.passed for r in targeted) if targeted else None,
        "cases": {r.name: asdict(r) for r in results},
    }
    if skipped:
        document["skipped"] = dict(skipped)
    document.update(extra or {})
    (out / f"{name}.json").write_text(json.dumps(document, indent=2) + "\n")

    table = markdown_table(results, floor=floor, rows=info.get("rows"), skipped=skipped)
    setup = (
        f"{info.get('rows', '?'):_} rows, best of {info.get('repeat', '?')} runs after one "
        f"warm-up, {info.get('spark_master', '?')} on {info.get('host_cores')} host cores; "
        f"Python {info['python']}, PySpark {info['pyspark']}, pyarrow {info['pyarrow']}; "
        f"{info['date']}."
    )
    medians = ", ".join(
        f"{r.name} {r.median_ratio_to_floor:.2f}"
        for r in results
        if r.name != floor and r.median_ratio_to_floor is not None
    )
    markdown = f"# {title}\n\n{setup}\n\n{table}"
    if medians and results and len(results[0].seconds) > 1:
        markdown += f"\nMedian of the per-round ratios (noise check): {medians}.\n"
    if notes:
        markdown += f"\n{notes.strip()}\n"
    (out / f"{name}.md").write_text(markdown)
    return markdown
