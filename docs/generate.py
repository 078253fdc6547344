"""Regenerate the generated tables in docs/ (`make docs`).

Each page marks an options table with ``<!-- options:NAME -->`` ... ``<!-- /options -->``
where NAME is a built-in sink's format name or ``common``; the type-fidelity matrix,
declared in tests/fidelity_matrix.py and checked by tests/integration/
test_type_fidelity.py, goes between ``<!-- fidelity-matrix -->`` and
``<!-- /fidelity-matrix -->``; the package's module tree (each module with the first
sentence of its docstring), read from the source, goes between ``<!-- module-tree -->`` and
``<!-- /module-tree -->`` (docs/architecture.md); the constructor parameters of Quix's
sinks and the options that replace them (docs/quix_parameters.py) go between
``<!-- quix-parameters:FORMAT -->`` and ``<!-- /quix-parameters -->``. ``--check`` exits
1 when a page is out of date (the unit tests run it, so the docs cannot drift from the code
or the tests).
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
from pathlib import Path

from quixsinks.core.options import SinkOptions
from quixsinks.core.sink import CommonOptions

DOCS = Path(__file__).resolve().parent
BLOCK = re.compile(r"(<!-- options:([\w-]+) -->\n)(.*?)(<!-- /options -->)", re.S)
MATRIX = re.compile(r"(<!-- fidelity-matrix -->\n)(.*?)(<!-- /fidelity-matrix -->)", re.S)
QUIX = re.compile(r"(<!-- quix-parameters:([\w-]+) -->\n)(.*?)(<!-- /quix-parameters -->)", re.S)
TREE = re.compile(r"(<!-- module-tree -->\n)(.*?)(<!-- /module-tree -->)", re.S)
PACKAGE = DOCS.parent / "quixsinks"


def options_class(name: str) -> type[SinkOptions]:
    """``common`` or a built-in sink's format name -> its options class."""
    if name == "common":
        return CommonOptions
    from quixsinks.spark.sources import data_source

    # the options need no extra: a docs build without pyiceberg still renders iceberg's
    options: type[SinkOptions] = data_source(name).sink_class.options_class
    return options


def table(name: str) -> str:
    cls = options_class(name)
    common = {spec.name: spec for spec in CommonOptions.specs()}
    rows = ["| option (camelCase) | type | default | description |", "|---|---|---|---|"]
    # required options first (in declaration order), then the optional ones
    for spec in sorted(cls.specs(), key=lambda spec: not spec.required):
        if name != "common" and common.get(spec.name) == spec:
            continue  # a common option as the common table shows it (a sink may override one)
        names = f"`{spec.name}`" + (
            f" (`{spec.camel_name}`)" if spec.camel_name != spec.name else ""
        )
        doc = spec.doc.replace("|", "\\|")
        for limit in spec.limits():
            doc += f"; {limit}"
        if spec.env:
            doc += f"; env `{spec.env}`"
        if spec.is_secret:
            doc += "; secret: never logged"
        kind = " \\| ".join(spec.choices) if spec.choices else spec.type_name
        rows.append(f"| {names} | {kind} | `{spec.default_text()}` | {doc} |")
    return "\n".join(rows) + "\n"


def quix_parameters(fmt: str) -> str:
    """The constructor parameters of the Quix sinks ``fmt`` replaces -> its options
    (docs/quix_parameters.py holds the parameters and the notes)."""
    sys.path.insert(0, str(DOCS))
    from quix_parameters import SINKS

    specs = options_class(fmt).specs()
    names = {spec.name: spec.name for spec in specs}
    names.update({alias: spec.name for spec in specs for alias in spec.aliases})
    lines = [""]  # a blank line after the marker: the table is not part of its HTML block
    for sink in (s for s in SINKS if s.format == fmt):
        lines += [
            f"`{sink.module}.{sink.name}`:",
            "",
            "| Quix parameter | quixsinks option |",
            "|---|---|",
        ]
        for parameter in sink.parameters:
            note = sink.notes.get(parameter)
            if note is None:
                option = names[parameter]
                note = f"`{option}`" + (" (alias)" if option != parameter else "")
            shown = f"`**{parameter}`" if parameter == "kwargs" else f"`{parameter}`"
            lines.append(f"| {shown} | {note.replace('|', chr(92) + '|')} |")
        lines.append("")
    return "\n".join(lines)


def fidelity_matrix() -> str:
    sys.path.insert(0, str(DOCS.parent))
    from tests.fidelity_matrix import markdown

    return markdown()


def _summary(path: Path) -> str:
    """The first sentence of a module's docstring (read without importing it)."""
    doc = ast.get_docstring(ast.parse(path.read_text()))
    paragraph = " ".join(doc.strip().split("\n\n")[0].split()) if doc else ""
    end = paragraph.find(". ")
    return paragraph if end < 0 else paragraph[: end + 1]


def module_tree() -> str:
    """quixsinks/ as a tree: every package and module with its docstring's first sentence."""
    lines = ["```"]

    def walk(folder: Path, depth: int) -> None:
        entries = sorted(
            p
            for p in folder.iterdir()
            if (p.is_dir() and (p / "__init__.py").exists())
            or (p.suffix == ".py" and p.name != "__init__.py")
        )
        for entry in entries:
            indent = "  " * depth
            if entry.is_dir():
                name = f"{entry.name}/"
                summary = _summary(entry / "__init__.py")
            else:
                name, summary = entry.name, _summary(entry)
            lines.append(
                f"{indent}{name:<{max(24 - len(indent), len(name) + 1)}} {summary}".rstrip()
            )
            if entry.is_dir():
                walk(entry, depth + 1)

    lines.append(f"quixsinks/{'':15} {_summary(PACKAGE / '__init__.py')}".rstrip())
    walk(PACKAGE, 1)
    lines.append("```")
    return "\n".join(lines) + "\n"


def render(text: str) -> str:
    text = BLOCK.sub(lambda m: m.group(1) + table(m.group(2)) + m.group(4), text)
    text = QUIX.sub(lambda m: m.group(1) + quix_parameters(m.group(2)) + m.group(4), text)
    text = TREE.sub(lambda m: m.group(1) + module_tree() + m.group(3), text)
    return MATRIX.sub(lambda m: m.group(1) + fidelity_matrix() + m.group(3), text)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--check", action="store_true", help="fail if a page is stale")
    args = parser.parse_args()
    stale = []
    for page in sorted(DOCS.rglob("*.md")):
        text = page.read_text()
        new = render(text)
        if new != text:
            stale.append(page)
            if not args.check:
                page.write_text(new)
    for page in stale:
        print(("stale: " if args.check else "updated: ") + str(page.relative_to(DOCS.parent)))
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
