"""The benchmark summary (benchmarks/harness/summary.py): docs/benchmarks.md holds what the
committed results give, every declared case exists, and targets are judged on one page."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.unit.harness_modules import harness_module


@pytest.fixture(scope="module")
def summary() -> ModuleType:
    return harness_module("summary")  # standalone: json and the results


def test_the_docs_summary_is_what_the_committed_results_give(summary: ModuleType) -> None:
    pages = summary.load_pages(summary.RESULTS)
    doc = summary.DOC.read_text(encoding="utf-8")
    expected = summary.replace_section(doc, summary.markdown(summary.summarize(pages)))
    assert doc == expected, "run: .venv/bin/python benchmarks/harness/summary.py"
    stored = json.loads((summary.RESULTS / "summary.json").read_text(encoding="utf-8"))
    assert stored == json.loads(json.dumps(summary.summarize(pages)))


def test_every_sink_with_a_benchmark_page_is_in_the_summary(summary: ModuleType) -> None:
    from quixsinks.spark.registry import BUILTIN_SINKS

    named = " ".join(sink.label for sink in summary.SINKS)
    pages = {path.stem for path in summary.RESULTS.glob("*.json")}
    for name in BUILTIN_SINKS:
        if name in pages:  # a sink with a page of its own must have a summary row
            assert f"`{name}`" in named, name


def _pages() -> dict[str, Any]:
    def case(name: str, rows_per_s: float, rounds: list[float]) -> dict[str, Any]:
        return {"name": name, "rows_per_s": rows_per_s, "round_ratios": rounds}

    return {
        "redis": {
            "floor": "noop-arrow",
            "machine": {"date": "2026-11-27T00:00:00+00:00", "rows": 1000},
            "cases": {
                "noop-arrow": case("noop-arrow", 1000.0, [1.0, 1.0, 1.0]),
                "redis-string": case("redis-string", 450.0, [0.5, 0.4, 0.45]),
                "server-limit": case("server-limit", 500.0, [0.5, 0.5, 0.5]),
            },
            "targets": [{"target": "latency <= 10 ms", "measured": "12 ms", "passed": False}],
        }
    }


def test_targets_are_ratios_of_one_pages_cases(summary: ModuleType) -> None:
    pages = _pages()
    best, median = summary.ratio(pages, "redis", "redis-string", "server-limit")
    assert best == pytest.approx(0.9)
    assert median == pytest.approx(0.9)  # rounds: 1.0, 0.8, 0.9
    target = summary.Target("redis at the ceiling", "redis", "redis-string", "server-limit", 0.95)
    judged = summary.judge(pages, target)
    assert judged["passed"] is False
    assert judged["floor_bound"] == pytest.approx(2.0)  # the floor is twice the ceiling
    pages["redis"]["cases"]["redis-string"]["rows_per_s"] = 480.0
    assert summary.judge(pages, target)["passed"] is True


def test_a_renamed_case_fails_loudly(summary: ModuleType) -> None:
    pages = _pages()
    broken = copy.deepcopy(pages)
    broken["redis"]["cases"]["redis-str"] = broken["redis"]["cases"].pop("redis-string")
    with pytest.raises(summary.SummaryError, match=r"no case 'redis-string'.*redis-str"):
        summary.ratio(broken, "redis", "redis-string", "server-limit")
    with pytest.raises(summary.SummaryError, match="no results of page 'kinesis'"):
        summary.ratio(pages, "kinesis", "kinesis", "server-limit")


def test_a_pages_own_judged_targets_join_the_table_and_the_section_is_replaced(
    summary: ModuleType, tmp_path: Path
) -> None:
    (tmp_path / "redis.json").write_text(json.dumps(_pages()["redis"]))
    doc = tmp_path / "benchmarks.md"
    doc.write_text(f"# B\n\nintro\n\n{summary.START}\nold\n{summary.END}\n\n## Rest\n")
    document = summary.summarize(summary.load_pages(tmp_path), sinks=(), targets=())
    assert document["targets"][0] == {
        "page": "redis",
        "target": "latency <= 10 ms",
        "measured": "12 ms",
        "passed": False,
    }
    text = summary.replace_section(doc.read_text(), summary.markdown(document))
    assert "old" not in text
    assert text.startswith("# B\n\nintro\n\n<!-- summary:start -->\n")
    assert text.endswith("<!-- summary:end -->\n\n## Rest\n")
    assert "| latency <= 10 ms | 12 ms |  | **missed** |" in text
    with pytest.raises(summary.SummaryError, match="markers"):
        summary.replace_section("# no markers\n", "x")


def test_a_target_against_the_floor_is_bounded_by_the_cpu_pages_figures(
    summary: ModuleType,
) -> None:
    pages = _pages()
    pages["cpu"] = {"cases": {}, "cpu": {"redis-string": {"cpu_bound": 0.6}}}
    target = summary.Target(
        "redis", "redis", "redis-string", "noop-arrow", 0.85, cpu="redis-string"
    )
    judged = summary.judge(pages, target)
    assert judged["floor_bound"] == 0.6
    assert judged["passed"] is False  # 0.45x: the bound explains it, it does not excuse it
    missing = summary.Target("x", "redis", "redis-string", "noop-arrow", 0.85, cpu="other")
    with pytest.raises(summary.SummaryError, match="no CPU figures of case 'other'"):
        summary.judge(pages, missing)


def test_a_target_against_a_ceiling_is_bounded_by_the_cpu_its_runs_cost(
    summary: ModuleType,
) -> None:
    """1,000 rows a run costing 5 CPU-s on 2 cores take at least 2.5 s: 400 rows/s at
    best, 0.8x of a 500 rows/s ceiling; a target of 0.9x is out of reach."""
    pages = _pages()
    target = summary.Target("redis at the ceiling", "redis", "redis-string", "server-limit", 0.9)
    assert summary.judge(pages, target)["cpu_bound"] is None  # a page without CPU figures
    pages["redis"]["machine"]["host_cores"] = 2
    pages["redis"]["cases"]["redis-string"]["cpu_s"] = 5.0
    judged = summary.judge(pages, target)
    assert judged["cpu_bound"] == pytest.approx(0.8)
    line = next(
        row
        for row in summary.markdown({"sinks": [], "targets": [judged]}).splitlines()
        if row.startswith("| redis at the ceiling")
    )
    assert "| 2.00x, 0.80x CPU |" in line


def test_a_target_can_be_bounded_by_what_its_design_costs_without_spark(
    summary: ModuleType,
) -> None:
    """PostgreSQL's staged design copies every row twice: a case doing just that, without
    Spark, bounds what the sink can reach against the same peer."""
    pages = _pages()
    pages["redis"]["cases"]["staged"] = {"name": "staged", "rows_per_s": 400.0}
    target = summary.Target(
        "redis at the ceiling", "redis", "redis-string", "server-limit", 0.95, design="staged"
    )
    judged = summary.judge(pages, target)
    assert judged["design_bound"] == pytest.approx(0.8)
    table = summary.markdown({"sinks": [], "targets": [judged]})
    assert "| 2.00x, 0.80x `staged` |" in table


def test_a_target_against_a_case_of_the_cpu_page_is_bounded_by_their_cpu_seconds(
    summary: ModuleType,
) -> None:
    pages = _pages()
    pages["cpu"] = {"cases": {}, "cpu": {"a": {"cpu_s": 5.0}, "spark": {"cpu_s": 4.0}}}
    target = summary.Target("a vs Spark", "redis", "redis-string", "server-limit", 0.85, cpu="a")
    pages["cpu"]["cpu"]["server-limit"] = pages["cpu"]["cpu"].pop("spark")
    assert summary.judge(pages, target)["cpu_bound"] == pytest.approx(0.8)
