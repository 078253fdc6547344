"""CHANGELOG.md keeps the Keep a Changelog 1.1.0 form, and the commands it gives run.

The form: one ``# Changelog``; ``## [Unreleased]`` first, then ``## [x.y.z] - YYYY-MM-DD``
per release, newest first; under a version only ``### Added``, ``Changed``,
``Deprecated``, ``Removed``, ``Fixed`` and ``Security``, each at most once and in that
order; a link reference per version at the bottom.

The commands: every ``make ...`` and ``python -m quixsinks ...`` written as code (a code
span or a line of a fenced block) names a target the Makefile has, or a subcommand the
CLI has, and passes only options make or the CLI accepts (``make bench --quick`` is
refused by make).
"""

from __future__ import annotations

import contextlib
import datetime
import io
import re
import shlex
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from quixsinks import cli

ROOT = Path(__file__).resolve().parents[2]
CHANGELOG = ROOT / "CHANGELOG.md"
MAKEFILE = ROOT / "Makefile"

SECTIONS = ("Added", "Changed", "Deprecated", "Removed", "Fixed", "Security")
UNRELEASED = "[Unreleased]"
RELEASE = re.compile(r"\[(\d+\.\d+\.\d+)\] - (\d{4}-\d{2}-\d{2})")

#: make's short options whose argument may be the next word (``make -C dir test``)
MAKE_OPTIONS_WITH_ARGUMENT = {"-C", "-E", "-f", "-I", "-o", "-W"}

_FENCE = re.compile(r"^\s*(```|~~~)")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_CODE_SPAN = re.compile(r"(?<!`)(`+)(?!`)(.+?)(?<!`)\1(?!`)", re.DOTALL)
_MAKE = re.compile(r"(?:^|[;&|(]\s*)make(?=\s|$)([^;&|)]*)")
_QUIXSINKS = re.compile(r"(?:^|[\s;&|(])(?:\S*/)?python3?\s+-m\s+quixsinks(?=\s|$)([^;&|)]*)")
_OPTION_IN_HELP = re.compile(r"(?<![\w-])(--?[A-Za-z][\w-]*)")


def changelog() -> str:
    return CHANGELOG.read_text(encoding="utf-8")


def prose_and_fenced(text: str) -> tuple[list[tuple[int, str]], list[str]]:
    """The lines outside fenced code blocks (with their numbers) and the lines inside."""
    prose: list[tuple[int, str]] = []
    fenced: list[str] = []
    inside = False
    for number, line in enumerate(text.splitlines(), start=1):
        if _FENCE.match(line):
            inside = not inside
        elif inside:
            fenced.append(line)
        else:
            prose.append((number, line))
    return prose, fenced


def headings(text: str) -> list[tuple[int, int, str]]:
    """(line number, level, title) of every heading outside code blocks."""
    found = []
    for number, line in prose_and_fenced(text)[0]:
        match = _HEADING.match(line)
        if match:
            found.append((number, len(match.group(1)), match.group(2)))
    return found


def code(text: str) -> Iterator[str]:
    """Every code span (whitespace collapsed: a span may wrap) and every fenced line."""
    prose, fenced = prose_and_fenced(text)
    for match in _CODE_SPAN.finditer("\n".join(line for _, line in prose)):
        yield " ".join(match.group(2).split())
    for line in fenced:
        yield line.strip().removeprefix("$ ")


def versions(text: str) -> list[tuple[int, str]]:
    return [(number, title) for number, level, title in headings(text) if level == 2]


def test_one_title_first() -> None:
    found = headings(changelog())
    titles = [(number, title) for number, level, title in found if level == 1]
    assert [title for _, title in titles] == ["Changelog"], titles
    assert found[0][1] == 1, f"line {found[0][0]}: the first heading must be '# Changelog'"


def test_unreleased_first_then_dated_versions_newest_first() -> None:
    found = versions(changelog())
    assert found, "no version heading"
    assert found[0][1] == UNRELEASED, f"line {found[0][0]}: the first version is {UNRELEASED}"
    previous: tuple[tuple[int, ...], datetime.date] | None = None
    for number, title in found[1:]:
        match = RELEASE.fullmatch(title)
        assert match, (
            f"line {number}: {title!r} is not '[x.y.z] - YYYY-MM-DD' (or a 2nd {UNRELEASED})"
        )
        release = tuple(int(part) for part in match.group(1).split("."))
        date = datetime.date.fromisoformat(match.group(2))
        if previous is not None:
            assert release < previous[0], f"line {number}: {title} is not older than the one above"
            assert date <= previous[1], f"line {number}: {title} is dated after the one above"
        previous = (release, date)


def test_sections_are_keep_a_changelog_ones_once_each_in_order() -> None:
    version = None
    seen: list[str] = []
    for number, level, title in headings(changelog()):
        assert level <= 3, f"line {number}: heading {title!r} is deeper than '###'"
        if level == 2:
            version, seen = title, []
        elif level == 3:
            assert version is not None, f"line {number}: section {title!r} before any version"
            assert title in SECTIONS, f"line {number}: {title!r} is not one of {SECTIONS}"
            assert title not in seen, f"line {number}: a second {title!r} in {version}"
            assert not seen or SECTIONS.index(title) > SECTIONS.index(seen[-1]), (
                f"line {number}: {title!r} after {seen[-1]!r} in {version}; order: {SECTIONS}"
            )
            seen.append(title)


def test_every_version_has_a_link_reference() -> None:
    text = changelog()
    for number, title in versions(text):
        name = title.split(" - ")[0]
        assert re.search(rf"^{re.escape(name)}: https://\S+$", text, re.MULTILINE), (
            f"line {number}: no link reference '{name}: https://...' for {title!r}"
        )


def makefile_targets() -> set[str]:
    targets: set[str] = set()
    for line in MAKEFILE.read_text(encoding="utf-8").splitlines():
        match = re.match(r"^([^\s#:=][^#:=]*?)\s*::?(?!=)", line)
        if match:
            targets.update(
                word for word in match.group(1).split() if "$" not in word and "%" not in word
            )
    return targets - {".PHONY"}


def make_commands(text: str) -> list[list[str]]:
    return [shlex.split(m.group(1)) for span in code(text) for m in _MAKE.finditer(span)]


def test_make_commands_name_real_targets() -> None:
    targets = makefile_targets()
    assert {"test", "bench", "docs"} <= targets, f"Makefile not parsed: {sorted(targets)}"
    wrong = []
    for words in make_commands(changelog()):
        argument_next = False
        for word in words:
            if argument_next or word.startswith("-") or "=" in word:
                argument_next = word in MAKE_OPTIONS_WITH_ARGUMENT
            elif word not in targets:
                wrong.append(f"make {' '.join(words)}: no target {word!r} in the Makefile")
    assert not wrong, "\n".join(wrong)


def test_make_commands_pass_only_options_make_accepts(tmp_path: Path) -> None:
    commands = [words for words in make_commands(changelog()) if any(w[:1] == "-" for w in words)]
    if not commands:
        return
    make = shutil.which("make")
    if make is None:
        pytest.skip("make is not installed: cannot ask it about " + repr(commands))
    wrong = []
    for words in commands:
        # make parses every option before it acts on --version, and reads no Makefile
        result = subprocess.run(
            [make, *words, "--version"], cwd=tmp_path, capture_output=True, text=True, check=False
        )
        if result.returncode != 0:
            wrong.append(f"make {' '.join(words)}: {result.stderr.splitlines()[0]}")
    assert not wrong, "\n".join(wrong)


def run_cli(argv: list[str]) -> tuple[int, str]:
    """quixsinks.cli.main's exit status and output for ``argv`` (ending in --help)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        try:
            status = cli.main(argv, out)
        except SystemExit as exc:
            status = exc.code if isinstance(exc.code, int) else 1
    return status, out.getvalue()


def test_quixsinks_commands_name_real_subcommands_and_options() -> None:
    commands = [
        shlex.split(m.group(1)) for span in code(changelog()) for m in _QUIXSINKS.finditer(span)
    ]
    status, top_help = run_cli(["--help"])
    assert status == 0, top_help
    wrong = []
    for words in commands:
        shown = f"python -m quixsinks {' '.join(words)}"
        # argparse refuses an unknown subcommand before it gets to --help
        status, output = run_cli([*words, "--help"])
        if status != 0:
            wrong.append(f"{shown}: {output.strip().splitlines()[-1]}")
            continue
        command = next((word for word in words if not word.startswith("-")), None)
        known = set(_OPTION_IN_HELP.findall(top_help))
        if command is not None:
            known |= set(_OPTION_IN_HELP.findall(run_cli([command, "--help"])[1]))
        wrong.extend(
            f"{shown}: no option {word.split('=')[0]!r}"
            for word in words
            if word.startswith("-") and word.split("=")[0] not in known
        )
    assert not wrong, "\n".join(wrong)
