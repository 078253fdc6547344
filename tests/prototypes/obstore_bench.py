"""Throughput and peak memory: the current object-store destinations against the obstore
prototype, on moto_server and Azurite (not GCS: object_store speaks GCS's XML API, which
the GCS emulator of the tests does not serve). An evaluation for issue #29, not a test and not
run by CI.

Each round writes ``--files`` objects of ``--mb`` MiB through ``write_with`` (the streamed
path the file sink uses: the producer writes 1 MiB at a time, as a Parquet writer does),
once through the current destination (S3Destination / AzureDestination)
and once through :class:`ObstoreDestination`, in the same process, alternating which goes
first; then it times the driver's commit of one micro-batch of 4 small staged files
(``FilePublisher.publish``: create-only marker, server-side moves, staging cleanup).
Peak RSS is sampled every 2 ms by a thread (``/proc/self/statm``) and reported above the
level at the start of the run. The servers share the machine's cores with the client:
compare the ratios, not the absolute figures.

Run: ``.venv/bin/python tests/prototypes/obstore_bench.py --files 6 --mb 16 --repeat 3``
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from quixsinks.core.destinations import Destination
from tests.prototypes.obstore_destination import ObstoreDestination

MiB = 1024 * 1024
PAGE = os.sysconf("SC_PAGE_SIZE")


def rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE


@contextmanager
def peak_rss() -> Iterator[list[int]]:
    """Yields a one-item list that holds, on exit, the peak RSS above the start (bytes)."""
    start = rss()
    peak = [start]
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.002):
            peak[0] = max(peak[0], rss())

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    result = [0]
    try:
        yield result
    finally:
        done.set()
        thread.join()
        result[0] = max(peak[0], rss()) - start


def write_files(dest: Destination, files: int, size_mb: int, chunk: bytes) -> float:
    """Seconds to stream ``files`` objects of ``size_mb`` MiB into ``dest``."""
    started = time.perf_counter()
    for i in range(files):
        written = dest.write_with(
            f"bench/{uuid.uuid4().hex}-{i}.bin",
            lambda out: [out.write(chunk) for _ in range(size_mb)],
        )
        assert written == size_mb * MiB
    return time.perf_counter() - started


def commit_ms(dest: Destination, rounds: int) -> float:
    """Median milliseconds of FilePublisher.publish for 4 staged 4 KiB files."""
    from quixsinks.core.batch import WriteContext
    from quixsinks.core.publish import FilePublisher, StagingArea

    area = StagingArea(dest)
    sink_id = f"bench-{uuid.uuid4().hex[:8]}"
    timings = []
    for batch in range(rounds):
        files = []
        for part in range(4):
            ctx = WriteContext(sink_id, batch, part, f"a{batch}-{part}", True, "bench")
            name = f"{sink_id}-{batch:010d}-{part:05d}-0000.bin"
            files.append(area.stage(ctx, name, b"x" * 4096, final_key=name, rows=1))
        started = time.perf_counter()
        FilePublisher(area).publish(sink_id, batch, files, query_id="bench")
        timings.append((time.perf_counter() - started) * 1000)
    return statistics.median(timings)


def destinations(stack: ExitStack, stores: list[str]) -> dict[str, Callable[[str], Destination]]:
    """Per store, a factory of a destination on a fresh bucket: ``factory("current")`` or
    ``factory("obstore")``."""
    from quixsinks.core.azure import AzureDestination
    from quixsinks.core.s3 import S3Destination
    from tests.services.azurite import AzuriteServer
    from tests.services.moto import MotoServer

    # store: (test server, how it makes a bucket, the current class, the prototype's factory)
    kinds: dict[str, tuple[Any, str, Any, Any]] = {
        "s3": (MotoServer, "create_bucket", S3Destination, ObstoreDestination.s3),
        "azure": (AzuriteServer, "create_container", AzureDestination, ObstoreDestination.azure),
    }
    factories: dict[str, Callable[[str], Destination]] = {}
    for store in stores:
        server_class, create, current, prototype = kinds[store]
        server = stack.enter_context(server_class())

        def factory(
            impl: str,
            server: Any = server,
            create: str = create,
            current: Any = current,
            prototype: Any = prototype,
        ) -> Destination:
            name = f"b{uuid.uuid4().hex[:12]}"
            getattr(server, create)(name)
            make = prototype if impl == "obstore" else current
            made: Destination = make(name, "out", **server.options())
            return made

        factories[store] = factory
    return factories


def isolated_peaks(stores: list[str], files: int, size_mb: int) -> dict[tuple[str, str], float]:
    """Peak RSS growth (MiB) of a fresh process per store and implementation: each child
    makes its client, writes one object (warm-up), then ``files`` more; what it reports is
    its lifetime peak (``ru_maxrss``) above its RSS after the warm-up. Allocators keep freed
    memory, so in one shared process a second run re-uses the first one's pages unseen."""
    import subprocess

    peaks = {}
    for store in stores:
        for impl in ("current", "obstore"):
            out = subprocess.run(
                [
                    sys.executable,
                    __file__,
                    "--child",
                    f"{store}:{impl}",
                    "--files",
                    str(files),
                    "--mb",
                    str(size_mb),
                ],
                capture_output=True,
                text=True,
                check=True,
            ).stdout
            peaks[(store, impl)] = float(out.strip().splitlines()[-1])
    return peaks


def child(spec: str, files: int, size_mb: int) -> None:
    import resource

    store, impl = spec.split(":")
    chunk = os.urandom(MiB)
    with ExitStack() as stack:
        dest = destinations(stack, [store])[store](impl)
        dest.write_with("warm", lambda out: out.write(chunk))
        base = rss()
        write_files(dest, files, size_mb, chunk)
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        print((peak - base) / MiB)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=6)
    parser.add_argument("--mb", type=int, default=16)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--commit-rounds", type=int, default=10)
    parser.add_argument("--stores", default="s3,azure")
    parser.add_argument("--out", type=Path, default=None, help="write the markdown table here")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(args.child, args.files, args.mb)
        return 0
    stores = args.stores.split(",")
    chunk = os.urandom(MiB)
    impls = ("current", "obstore")
    seconds: dict[tuple[str, str], list[float]] = {}
    peaks: dict[tuple[str, str], list[int]] = {}
    commits: dict[tuple[str, str], float] = {}

    with ExitStack() as stack:
        factories = destinations(stack, stores)
        for store in stores:
            for impl in impls:  # warm-up: clients made, connections open
                warm = factories[store](impl)
                warm.write_with("warm", lambda out: out.write(chunk))
        for round_ in range(args.repeat):
            for store in stores:
                order = impls if round_ % 2 == 0 else impls[::-1]
                for impl in order:
                    dest = factories[store](impl)
                    dest.write_with("warm", lambda out: out.write(chunk))
                    with peak_rss() as peak:
                        took = write_files(dest, args.files, args.mb, chunk)
                    seconds.setdefault((store, impl), []).append(took)
                    peaks.setdefault((store, impl), []).append(peak[0])
                    print(
                        f"round {round_} {store:5s} {impl:7s} "
                        f"{args.files * args.mb / took:7.1f} MiB/s  peak +{peak[0] / MiB:6.1f} MiB",
                        flush=True,
                    )
        for store in stores:
            for impl in impls:
                commits[(store, impl)] = commit_ms(factories[store](impl), args.commit_rounds)
                print(f"commit {store:5s} {impl:7s} {commits[(store, impl)]:7.1f} ms", flush=True)

    fresh = isolated_peaks(stores, args.files, args.mb)
    lines = [
        f"{args.files} files of {args.mb} MiB per run, {args.repeat} runs per implementation, "
        "interleaved; medians.",
        "",
        "| store | current MiB/s | obstore MiB/s | throughput ratio (obstore/current) "
        "| current peak RSS MiB | obstore peak RSS MiB | RSS ratio | current commit ms "
        "| obstore commit ms | current peak RSS, own process | obstore peak RSS, own process |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for store in stores:
        rate = {i: args.files * args.mb / statistics.median(seconds[(store, i)]) for i in impls}
        top = {i: statistics.median(peaks[(store, i)]) / MiB for i in impls}
        lines.append(
            f"| {store} | {rate['current']:.1f} | {rate['obstore']:.1f} "
            f"| {rate['obstore'] / rate['current']:.2f} | {top['current']:.1f} "
            f"| {top['obstore']:.1f} | {top['obstore'] / max(top['current'], 0.1):.2f} "
            f"| {commits[(store, 'current')]:.1f} | {commits[(store, 'obstore')]:.1f} "
            f"| {fresh[(store, 'current')]:.1f} | {fresh[(store, 'obstore')]:.1f} |"
        )
    table = "\n".join(lines)
    print(table)
    if args.out:
        args.out.write_text(table + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
