"""``python -m quixsinks``: check a sink's options and destination before a long job.

    python -m quixsinks check --format postgresql -o host=db -o dbname=app \\
        -o table_name=readings --column id:int64 --column ts:timestamp[us]
    python -m quixsinks sinks
    python -m quixsinks history --format file -o path=/data/out [--sink-id orders] [--json]
    python -m quixsinks --version

``check`` parses the options exactly as the sink would, checks them against the columns
you will write (``--column name:type``, pyarrow type names; optional), then runs the
sink's preflight: the once-per-driver check of the destination (connect, authenticate,
create the ledger, the bucket or directory exists and is writable...). No Spark session
starts. It prints one line per step, secrets redacted, and exits 1 at the first failure
(2 for a usage error). ``sinks`` lists the built-in sinks and, for each one that cannot
run here, the extra to install. ``history`` prints the commit records a sink keeps with its
ledger entries (one line per committed micro-batch: rows, dead letters, seconds...), as a
table or as JSON Lines (``--json``); see docs/errors.md.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import Any, TextIO

import pyarrow as pa

from . import __version__
from .core.errors import QuixSinksError
from .core.options import normalize_name
from .core.secrets import is_secret_name, scrub, secret_parts

__all__ = ["main"]


def _parse_options(pairs: Sequence[str]) -> dict[str, str]:
    options: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise SystemExit(f"python -m quixsinks: --option {pair!r} is not KEY=VALUE")
        options[key.strip()] = value
    return options


def _parse_columns(specs: Sequence[str]) -> pa.Schema:
    fields = []
    for spec in specs:
        name, sep, type_name = spec.partition(":")
        try:
            if not sep or not name:
                raise ValueError("expected NAME:TYPE")
            fields.append(pa.field(name, pa.type_for_alias(type_name.strip())))
        except ValueError as exc:
            raise SystemExit(
                f"python -m quixsinks: --column {spec!r}: {exc} (types are pyarrow names: "
                "int64, double, bool, string, binary, timestamp[us], date32...)"
            ) from None
    return pa.schema(fields)


class _Report:
    """Prints the steps; hides every secret value the user passed."""

    def __init__(self, out: TextIO, secrets: Sequence[str]) -> None:
        self.out = out
        self.secrets = [s for s in secrets if s]

    def line(self, text: str) -> None:
        print(scrub(text, self.secrets), file=self.out)

    def step(self, what: str, fn: Callable[[], Any]) -> bool:
        try:
            fn()
        except QuixSinksError as exc:
            self.line(f"  {what}: FAILED\n    {exc}")
            return False
        except Exception as exc:  # a client error the sink did not translate
            self.line(f"  {what}: FAILED\n    {type(exc).__name__}: {exc}")
            return False
        self.line(f"  {what}: ok")
        return True


def check(name: str, raw: dict[str, str], schema: pa.Schema | None, out: TextIO) -> int:
    """Run the checks of ``check``; 0 if all passed, else 1."""
    from .spark.registry import BUILTIN_SINKS, load_data_source

    report = _Report(out, [])
    report.line(f"quixsinks check: format {name!r}")
    if name not in BUILTIN_SINKS:
        report.line(f"  FAILED: no built-in sink {name!r}; built-in: {', '.join(BUILTIN_SINKS)}")
        return 1
    found: dict[str, Any] = {}
    if not report.step("client library", lambda: found.update(cls=load_data_source(name))):
        return 1
    sink_class = found["cls"].sink_class
    secret = {
        normalize_name(name)
        for spec in sink_class.options_class.specs()
        if spec.secret
        for name in (spec.name, *spec.aliases)
    }
    # every value the user gave under a secret's name, before parsing (an error may quote it)
    report.secrets = [
        v for k, v in raw.items() if v and (normalize_name(k) in secret or is_secret_name(k))
    ] + [part for v in raw.values() for part in secret_parts(v)]

    def parse() -> None:
        found["options"] = sink_class.options_class.from_options(raw)

    if not report.step("options", parse):
        return 1
    options = found["options"]
    report.secrets.extend(options.secret_values())  # from the environment and URLs too
    defaults = {spec.name: spec.default for spec in options.specs()}
    # redacted() may show more than the declared options (iceberg's catalog.* properties)
    given = {
        k: v
        for k, v in options.redacted().items()
        if (v != defaults[k] if k in defaults else bool(v))
    }
    report.line(f"    {given}")
    sink = sink_class(options)
    if schema is not None and len(schema):
        if not report.step(f"columns ({len(schema)})", lambda: sink.prepare(schema)):
            return 1
    else:
        report.line("  columns: not checked (give --column NAME:TYPE for each column)")
    if not report.step("destination (preflight)", sink.preflight):
        return 1
    report.line(f"result: ok ({sink_class.guarantee})")
    return 0


def history(name: str, raw: dict[str, str], sink_id: str | None, as_json: bool, out: TextIO) -> int:
    """Print the commit records of ``name`` with options ``raw``; 1 if they cannot be read."""
    from . import commit_records

    secrets = [v for k, v in raw.items() if v and is_secret_name(k)]
    secrets += [part for v in raw.values() for part in secret_parts(v)]
    report = _Report(out, secrets)
    options = {**raw, **({"sink_id": sink_id} if sink_id else {})}
    try:
        table = commit_records(name, **options)
    except QuixSinksError as exc:
        report.line(f"quixsinks history: {exc}")
        return 1
    rows = table.to_pylist()
    if as_json:
        import json

        for row in rows:
            row["counters"] = dict(row["counters"] or [])
            report.line(json.dumps(row, separators=(",", ":")))
        return 0
    columns = (
        "sink_id",
        "batch_id",
        "rows",
        "rows_written",
        "dead_lettered",
        "skipped",
        "retries",
        "write_seconds",
        "commit_seconds",
        "committed_at",
    )
    texts = [[_cell(row[c]) for c in columns] for row in rows]
    widths = [max([len(c), *(len(t[i]) for t in texts)]) for i, c in enumerate(columns)]
    report.line("  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)).rstrip())
    for text in texts:
        report.line("  ".join(t.ljust(w) for t, w in zip(text, widths, strict=True)).rstrip())
    report.line(f"({len(rows)} committed batch{'es' if len(rows) != 1 else ''})")
    return 0


def _cell(value: Any) -> str:
    return f"{value:.3f}" if isinstance(value, float) else str(value)


def sinks(out: TextIO) -> int:
    from .spark.registry import available_sinks

    for name, problem in available_sinks().items():
        print(f"{name:12} {'ok' if problem is None else problem}", file=out)
    return 0


def main(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    parser = argparse.ArgumentParser(
        prog="python -m quixsinks",
        description="Check a quixsinks sink's options and destination without Spark.",
    )
    parser.add_argument("--version", action="version", version=f"quixsinks {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    check_parser = commands.add_parser(
        "check", help="parse the options, check the columns, run the destination preflight"
    )
    check_parser.add_argument("--format", required=True, help="the sink, e.g. postgresql")
    check_parser.add_argument(
        "--option", "-o", action="append", default=[], metavar="KEY=VALUE", help="repeat"
    )
    check_parser.add_argument(
        "--column",
        action="append",
        default=[],
        metavar="NAME:TYPE",
        help="a column you will write (pyarrow type name); repeat",
    )
    commands.add_parser("sinks", help="the built-in sinks and the extras they need")
    history_parser = commands.add_parser(
        "history", help="the commit records a sink keeps with its ledger (one per micro-batch)"
    )
    history_parser.add_argument("--format", required=True, help="the sink, e.g. file")
    history_parser.add_argument(
        "--option", "-o", action="append", default=[], metavar="KEY=VALUE", help="repeat"
    )
    history_parser.add_argument("--sink-id", help="only this writer's records")
    history_parser.add_argument("--json", action="store_true", help="JSON Lines output")
    args = parser.parse_args(argv)
    if args.command == "sinks":
        return sinks(out)
    if args.command == "history":
        return history(args.format, _parse_options(args.option), args.sink_id, args.json, out)
    options = _parse_options(args.option)
    schema = _parse_columns(args.column) if args.column else None
    return check(args.format, options, schema, out)
