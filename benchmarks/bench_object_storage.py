"""Object-storage benchmark: the `file` sink (Parquet) on S3 and Azure against pyarrow.

One local session writes the same cached DataFrame (``--rows`` rows, six mixed columns)
in batch mode, runs interleaved, through:

* ``noop-arrow``: the floor (quixsinks' Arrow path, a sink that writes nothing);
* ``file-local``: the `file` sink to local disk;
* ``file-s3`` / ``file-azure``: the `file` sink to moto_server / Azurite (exactly-once:
  staged, create-only marker, server-side copy, staging deleted);
* ``pyarrow-s3`` / ``pyarrow-azure``: the baseline, pyarrow's own filesystems
  (``pyarrow.fs.S3FileSystem`` / ``AzureFileSystem`` at the same endpoint) writing each
  task's Arrow data as one Parquet file from the same tasks (at-least-once, no commit).

Targets (issue 9): ``file-s3`` and ``file-azure`` within 20% of their pyarrow baseline
(ratio >= 0.8). Separately, the driver's commit of one micro-batch of 4 staged files on
S3 is timed (target: under 100 ms).

The test servers run on this machine and share its two cores with Spark: compare ratios,
not absolute rows/s. Run: ``make bench`` or ``python benchmarks/bench_object_storage.py``.
"""

from __future__ import annotations

import statistics
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from common import (
    FLOOR,
    Case,
    argument_parser,
    bench_session,
    close_session,
    floor_case,
    machine_info,
    mixed_dataframe,
    register_floor,
    run_cases,
    select_cases,
    write_results,
)

from quixsinks import BatchingSink, CommonOptions, SinkBatch, option

NAME = "object_storage"


@dataclass(frozen=True, kw_only=True)
class PyArrowFSOptions(CommonOptions):
    sink_name: ClassVar[str] = "bench_pyarrow_fs"
    kind: str = option(doc="s3 or azure")
    path: str = option(doc="bucket/prefix (S3) or container/prefix (Azure)")
    endpoint: str = option(doc="host:port of the test server")
    key: str = option(doc="access key id (S3) or account name (Azure)")
    secret: str = option(doc="secret key (S3) or account key (Azure)", secret=True)


class PyArrowFSSink(BatchingSink[PyArrowFSOptions]):
    """The baseline: each SinkBatch written as one Parquet file by pyarrow's filesystem."""

    name: ClassVar[str] = "bench_pyarrow_fs"
    options_class = PyArrowFSOptions

    def write(self, batch: SinkBatch) -> None:
        import pyarrow.fs as pafs
        import pyarrow.parquet as pq

        opts = self.options
        fs: Any
        if opts.kind == "s3":
            fs = pafs.S3FileSystem(
                access_key=opts.key,
                secret_key=opts.secret,
                endpoint_override=opts.endpoint,
                scheme="http",
                region="us-east-1",
            )
        else:
            fs = pafs.AzureFileSystem(
                opts.key,
                account_key=opts.secret,
                blob_storage_authority=opts.endpoint,
                blob_storage_scheme="http",
                dfs_storage_authority=opts.endpoint,
                dfs_storage_scheme="http",
            )
        with fs.open_output_stream(f"{opts.path}/{uuid.uuid4().hex}.parquet") as out:
            pq.write_table(batch.table, out, compression="snappy")


def main(argv: list[str] | None = None) -> int:
    parser = argument_parser(__doc__.splitlines()[0])
    args = parser.parse_args(argv)
    partitions = args.partitions or args.cores

    import quixsinks
    from tests.services.azurite import ACCOUNT, ACCOUNT_KEY, AzuriteServer
    from tests.services.moto import MotoServer

    with MotoServer() as moto, AzuriteServer() as azurite:
        s3 = moto.options()

        def fresh(kind: str) -> str:
            name = f"b{uuid.uuid4().hex[:12]}"
            if kind == "s3":
                moto.create_bucket(name)
            else:
                azurite.create_container(name)
            return name

        def file_case(kind: str) -> Any:
            def write(df: Any, path: str) -> None:
                options = (
                    dict(s3)
                    if kind == "s3"
                    else {"azure_connection_string": azurite.connection_string()}
                )
                url = f"s3://{fresh('s3')}/out" if kind == "s3" else f"az://{fresh('azure')}/out"
                writer = df.write.format("file").option("path", url).option("format", "parquet")
                writer.options(**{k: str(v) for k, v in options.items()}).mode("append").save()

            return write

        def pyarrow_case(kind: str) -> Any:
            def write(df: Any, path: str) -> None:
                endpoint = f"127.0.0.1:{moto.port}" if kind == "s3" else f"127.0.0.1:{azurite.port}"
                key, secret = (
                    (s3["aws_access_key_id"], s3["aws_secret_access_key"])
                    if kind == "s3"
                    else (ACCOUNT, ACCOUNT_KEY)
                )
                writer = df.write.format("bench_pyarrow_fs").options(
                    kind=kind, path=f"{fresh(kind)}/out", endpoint=endpoint, key=key, secret=secret
                )
                writer.mode("append").save()

            return write

        def local(df: Any, path: str) -> None:
            df.write.format("file").option("path", path).option("format", "parquet").mode(
                "append"
            ).save()

        cases = [
            floor_case(),
            Case("file-local", local, "quixsinks `file` sink, parquet, local disk"),
            Case(
                "pyarrow-s3",
                pyarrow_case("s3"),
                "pyarrow S3FileSystem, one Parquet file per task (baseline)",
                count_rows=None,
            ),
            Case(
                "file-s3",
                file_case("s3"),
                "quixsinks `file` sink, parquet, S3 (moto_server), exactly-once",
                count_rows=None,
            ),
            Case(
                "pyarrow-azure",
                pyarrow_case("azure"),
                "pyarrow AzureFileSystem, one Parquet file per task (baseline)",
                count_rows=None,
            ),
            Case(
                "file-azure",
                file_case("azure"),
                "quixsinks `file` sink, parquet, Azure Blob (Azurite), exactly-once",
                count_rows=None,
            ),
        ]
        cases = select_cases(cases, args.cases, floor=FLOOR)
        spark = bench_session("quixsinks-bench-object-storage", args.cores, verbose=args.verbose)
        try:
            quixsinks.register(spark, PyArrowFSSink)
            register_floor(spark)
            df = mixed_dataframe(spark, args.rows, partitions)
            results = run_cases(
                df,
                cases,
                floor=FLOOR,
                rows=args.rows,
                repeat=args.repeat,
                workdir=args.tmp,
                log=lambda line: print(line, flush=True),
            )
            info = machine_info(spark, rows=args.rows, repeat=args.repeat, partitions=partitions)
            df.unpersist()
        finally:
            close_session(spark)
        commit_ms = commit_cost(moto)

    by_name = {r.name: r for r in results}
    judged = []
    for store in ("s3", "azure"):
        ours, base = by_name.get(f"file-{store}"), by_name.get(f"pyarrow-{store}")
        if ours and base and ours.rows_per_s and base.rows_per_s:
            ratio = ours.rows_per_s / base.rows_per_s
            judged.append((f"file-{store} vs pyarrow-{store}", ratio, ratio >= 0.8))
    judged.append(("S3 commit of 4 files (median ms)", commit_ms, commit_ms < 100))
    notes = "\n".join(
        [
            "",
            "| target | measured | met |",
            "|---|---:|---|",
            *(f"| {what} | {value:.2f} | {'yes' if ok else 'no'} |" for what, value, ok in judged),
            "",
            "Ratios of rows/s in the same session, runs interleaved. moto_server (Python) and "
            "Azurite (Node) run on the same two cores as Spark, so absolute rows/s say more "
            "about them than about S3 or Azure. pyarrow's writers skip everything the sink "
            "adds: staging, the create-only marker, the server-side copy to the final name "
            "and the staging cleanup (exactly-once).",
        ]
    )
    markdown = write_results(
        args.out,
        NAME,
        title="quixsinks object-storage benchmark: the file sink on S3 and Azure vs pyarrow",
        info=info,
        results=results,
        floor=FLOOR,
        notes=notes,
    )
    print(markdown)
    return 0 if all(ok for _, _, ok in judged) or not args.strict else 1


def commit_cost(moto: Any, rounds: int = 20) -> float:
    """Median milliseconds of FilePublisher.publish for 4 staged files on S3."""
    from quixsinks.core.batch import WriteContext
    from quixsinks.core.publish import FilePublisher, StagingArea
    from quixsinks.core.s3 import S3Destination

    bucket = f"c{uuid.uuid4().hex[:12]}"
    moto.create_bucket(bucket)
    area = StagingArea(S3Destination(bucket, "out", **moto.options()))
    timings = []
    for batch in range(rounds):
        files = []
        for part in range(4):
            ctx = WriteContext("bench", batch, part, f"a{batch}-{part}", True, "bench")
            name = f"bench-{batch:010d}-{part:05d}-0000.parquet"
            files.append(area.stage(ctx, name, b"x" * 4096, final_key=name, rows=1))
        started = time.perf_counter()
        FilePublisher(area).publish("bench", batch, files, query_id="bench")
        timings.append((time.perf_counter() - started) * 1000)
    return statistics.median(timings)


if __name__ == "__main__":
    sys.exit(main())
