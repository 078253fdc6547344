"""Every benchmark of ``make bench`` in ``--quick`` mode, in turn, in one process and one session.

Each ``benchmarks/bench_*.py`` run alone starts its own JVM, Python workers and servers,
which is most of a quick run. Here the benchmarks' modules are imported and their
``main(["--quick", ...])`` called one after the other inside the harness's
``shared_session`` and ``shared_servers``: every benchmark gets the same running session
(its end only drops the benchmark's cached data and settings), and a server is started
the first time a benchmark asks for it and kept for the benchmarks after it (the two
InfluxDB benchmarks share one). The test suite runs this
(``tests/integration/test_bench_quick.py``); ``make bench`` does not.

Writes into ``--out``:

* ``<bench>/``: the benchmark's ``<name>.json`` and ``<name>.md`` (its ``--out``);
* ``<bench>.log``: everything the benchmark printed (file descriptors 1 and 2, so the
  servers it starts too);
* ``summary.json``, rewritten after each benchmark: ``{bench: {"returncode", "error",
  "seconds", "out", "log"}}``; ``error`` is None or the traceback (or the message) of what
  went wrong beyond a return code.

One benchmark failing does not stop the others; the exit status is 0 when every one
returned 0 without an error.

Run: ``.venv/bin/python benchmarks/quick.py [--out DIR] [bench_foundation ...]`` (default:
the Makefile's ``bench`` target, in its order).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import os
import re
import sys
import tempfile
import time
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from harness.cli import BENCH_DIR
from harness.servers import missing, shared_servers
from harness.session import close_session, shared_session

ROOT = BENCH_DIR.parent


def makefile_benches() -> list[str]:
    """The benchmark modules of the Makefile's ``bench`` target, in its order."""
    return re.findall(r"benchmarks/(bench_\w+)\.py", (ROOT / "Makefile").read_text())


@contextlib.contextmanager
def output_to(path: Path) -> Iterator[None]:
    """File descriptors 1 and 2 (and so ``print``, logging and child processes) to ``path``."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    try:
        with open(path, "wb") as log:
            os.dup2(log.fileno(), 1)
            os.dup2(log.fileno(), 2)
            try:
                yield
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os.dup2(saved[0], 1)
                os.dup2(saved[1], 2)
    finally:
        os.close(saved[0])
        os.close(saved[1])


@contextlib.contextmanager
def restored_globals() -> Iterator[None]:
    """``sys.path`` and ``os.environ`` as they were, whatever the benchmark changed."""
    path, environ = list(sys.path), dict(os.environ)
    try:
        yield
    finally:
        sys.path[:] = path
        for key in set(os.environ) - set(environ):
            del os.environ[key]
        for key, value in environ.items():
            if os.environ.get(key) != value:
                os.environ[key] = value


def pages(benches: list[str]) -> list[Any]:
    """The ``PAGE`` of each benchmark module that imports (one that does not is left to
    :func:`run_one`, which reports it)."""
    found = []
    for bench in benches:
        try:
            found.append(importlib.import_module(bench).PAGE)
        except Exception:
            continue
    return found


def server_names(benches: list[str]) -> list[str]:
    """The servers the benchmarks need that can start here, in the order they need them."""
    names = dict.fromkeys(name for page in pages(benches) for name in page.servers)
    return [name for name in names if missing(name) is None]


def session_conf(benches: list[str]) -> dict[str, str]:
    """The settings the shared session must start with: every page's ``session_conf``
    (those a running session cannot change). A module that does not import is left to
    :func:`run_one`, which reports it."""
    conf: dict[str, str] = {}
    for page in pages(benches):
        for key, value in page.session_conf(None).items():
            if conf.setdefault(key, value) != value:
                raise RuntimeError(f"benchmarks need {key}={conf[key]!r} and {value!r}")
    return conf


def run_one(bench: str, out: Path, cores: int) -> dict[str, Any]:
    """Import ``bench`` and call its ``main`` in quick mode; what happened, never raising."""
    from pyspark import cloudpickle

    bench_out = out / bench
    bench_out.mkdir(parents=True, exist_ok=True)
    log = out / f"{bench}.log"
    returncode, error = 1, None
    started = time.perf_counter()
    with output_to(log), restored_globals():
        try:
            module = importlib.import_module(bench)
            # run as a script it would be __main__, whose classes Spark pickles by value;
            # its workers cannot import benchmarks/ modules
            cloudpickle.register_pickle_by_value(module)  # type: ignore[no-untyped-call]
            try:
                returncode = module.main(
                    ["--quick", "--out", str(bench_out), "--cores", str(cores)]
                )
            finally:
                with contextlib.suppress(ValueError):
                    cloudpickle.unregister_pickle_by_value(module)  # type: ignore[no-untyped-call]
        except SystemExit as exc:  # e.g. select_cases(), or a sys.exit() of its own
            if exc.code is None or isinstance(exc.code, int):
                returncode = exc.code or 0
            else:
                error = str(exc.code)
        except Exception:
            error = traceback.format_exc()
            print(error, file=sys.stderr, flush=True)
    return {
        "returncode": returncode,
        "error": error,
        "seconds": round(time.perf_counter() - started, 1),
        "out": str(bench_out),
        "log": str(log),
    }


def run(benches: list[str], out: Path, cores: int = 2) -> dict[str, dict[str, Any]]:
    """Run ``benches`` in turn in one shared session; ``out/summary.json`` after each."""
    summary: dict[str, dict[str, Any]] = {}
    pending = list(benches)
    conf = session_conf(benches)
    while pending:
        with shared_servers(server_names(pending)), shared_session(cores, **conf) as spark:
            while pending:
                bench = pending.pop(0)
                summary[bench] = result = run_one(bench, out, cores)
                stopped = spark.sparkContext._jsc is None
                if not stopped:  # in case its main() ended before its own close_session()
                    close_session(spark)
                else:  # a new shared session for the rest
                    result["error"] = (result["error"] or "") + (
                        f"{bench} stopped the shared session: end it with "
                        "harness.session.close_session(spark), not spark.stop()"
                    )
                (out / "summary.json.tmp").write_text(json.dumps(summary, indent=2) + "\n")
                (out / "summary.json.tmp").replace(out / "summary.json")
                status = "ok" if result["returncode"] == 0 and not result["error"] else "FAILED"
                print(
                    f"{bench}: {status} (exit {result['returncode']}) in "
                    f"{result['seconds']:.1f} s; output in {result['log']}",
                    flush=True,
                )
                if stopped:
                    break
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("benches", nargs="*", help="bench_* modules (default: the Makefile's)")
    parser.add_argument("--out", type=Path, default=None, help="default: a fresh temp folder")
    parser.add_argument("--cores", type=int, default=2, help="local[N] (default 2)")
    args = parser.parse_args(argv)
    out = args.out or Path(tempfile.mkdtemp(prefix="quixsinks-bench-quick-"))
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    summary = run(args.benches or makefile_benches(), out, args.cores)
    failed = [b for b, r in summary.items() if r["returncode"] != 0 or r["error"]]
    print(
        f"{len(summary)} benchmarks in {time.perf_counter() - started:.0f} s, "
        f"{len(failed)} failed{': ' + ', '.join(failed) if failed else ''}; results in {out}",
        flush=True,
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
