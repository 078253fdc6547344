"""README.md is the PyPI page: rendered the way PyPI renders it, it must hold one table of
every built-in sink, no stray table syntax, and only absolute links that resolve."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"


def mkdocs_setting(key: str) -> str:
    """``site_url`` / ``repo_url`` of mkdocs.yml: the one place the project's URLs live."""
    match = re.search(rf"^{key}: (\S+)$", (ROOT / "mkdocs.yml").read_text(), re.MULTILINE)
    assert match, f"mkdocs.yml has no {key}"
    return match.group(1)


class Page(HTMLParser):
    """The rendered README: its tables (rows of cell texts), text outside tables and
    code blocks, and link targets."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: list[list[list[str]]] = []
        self.loose_text: list[str] = []
        self.links: list[str] = []
        self._in_table = 0
        self._in_pre = 0
        self._cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "table":
            self._in_table += 1
            self.tables.append([])
        elif tag == "tr" and self._in_table:
            self.tables[-1].append([])
        elif tag in ("td", "th") and self._in_table:
            self._cell = []
        elif tag == "pre":
            self._in_pre += 1
        elif tag == "a":
            # in-page anchors are the renderer's own (readme-renderer 46 links each heading)
            self.links.extend(
                value or ""
                for name, value in attrs
                if name == "href" and not (value or "").startswith("#")
            )

    def handle_endtag(self, tag: str) -> None:
        if tag == "table":
            self._in_table -= 1
        elif tag in ("td", "th") and self._cell is not None:
            self.tables[-1][-1].append("".join(self._cell).strip())
            self._cell = None
        elif tag == "pre":
            self._in_pre -= 1

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)
        elif not self._in_table and not self._in_pre:
            self.loose_text.append(data)


@pytest.fixture(scope="module")
def page() -> Page:
    from readme_renderer.markdown import render

    html = render(README.read_text(), variant="GFM")
    assert html, "readme_renderer could not render README.md (is readme-renderer[md] installed?)"
    parsed = Page()
    parsed.feed(html)
    return parsed


def sink_table(page: Page) -> list[list[str]]:
    tables = [t for t in page.tables if t and t[0][:2] == ["format", "alias"]]
    assert len(tables) == 1, f"expected one sink table, found {len(tables)}"
    return tables[0]


def test_the_sink_table_is_one_table_with_one_row_per_builtin_sink(page: Page) -> None:
    from quixsinks.spark.registry import BUILTIN_SINKS

    header, *rows = sink_table(page)
    assert header == ["format", "alias", "destination", "guarantee", "extra"]
    names = [row[0] for row in rows]
    assert len(names) == len(set(names)), f"a sink appears twice: {names}"
    assert sorted(row[0] for row in rows) == sorted(BUILTIN_SINKS)
    for row in rows:
        assert len(row) == len(header), row
        assert row[1] == f"qs_{row[0]}", row
        assert row[3], f"{row[0]}: no guarantee"


def test_no_table_syntax_is_left_outside_tables(page: Page) -> None:
    stray = [line for line in "".join(page.loose_text).splitlines() if "|" in line]
    assert not stray, f"raw table text in the rendered README (a broken table?): {stray}"


def test_every_link_is_absolute_and_every_docs_link_has_its_page(page: Page) -> None:
    site, repo = mkdocs_setting("site_url"), mkdocs_setting("repo_url")
    assert page.links
    for link in page.links:
        assert link.startswith("https://"), f"{link}: relative links break on PyPI"
        if link.startswith(site):
            slug = link[len(site) :].split("#")[0].strip("/")
            source = ROOT / "docs" / (f"{slug}.md" if slug else "index.md")
            assert source.exists(), f"{link}: no docs/{source.relative_to(ROOT / 'docs')}"
        elif link.startswith(f"{repo}/blob/main/"):
            path = link[len(f"{repo}/blob/main/") :]
            assert (ROOT / path).exists(), f"{link}: no {path} in the repository"
        elif link.startswith(repo):
            pytest.fail(f"{link}: link a file as {repo}/blob/main/<path>")


def test_every_sink_row_links_its_docs_page(page: Page) -> None:
    site = mkdocs_setting("site_url")
    from quixsinks.spark.registry import BUILTIN_SINKS

    for name in BUILTIN_SINKS:
        assert f"{site}sinks/{name}/" in page.links, f"the README does not link the {name} page"


def test_the_first_screen_says_how_to_install_and_how_to_run_it() -> None:
    first_screen = README.read_text().split("\n## ", 1)[0]
    for command in ('pip install "quixsinks[', 'pip install "quixsinks[spark,', "make demo"):
        assert command in first_screen, command
    assert re.search(r"^make test ", first_screen, re.MULTILINE)


def test_the_example_defines_the_dataframe_it_writes() -> None:
    blocks = re.findall(r"^```python\n(.*?)^```", README.read_text(), re.MULTILINE | re.DOTALL)
    assert blocks, "the README has no Python example"
    assert len(blocks[0].strip().splitlines()) <= 6, "the first example is longer than 6 lines"
    assert re.search(r"^df = ", blocks[0], re.MULTILINE), "the example uses a df it never defines"
