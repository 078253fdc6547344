"""Options of the ``tsdatalake`` sink (Quix QuixTSDataLakeSink's names)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

from quixsinks.core.destinations import StorageOptions
from quixsinks.core.errors import OptionError
from quixsinks.core.options import option
from quixsinks.core.sink import LedgerOptions

__all__ = ["TIME_COLUMNS", "TSDataLakeOptions", "TimestampUnit"]

#: hive columns derived from the timestamp column (UTC, zero-padded)
TIME_COLUMNS = ("year", "month", "day", "hour")
TimestampUnit = Literal["ms", "s", "us", "ns"]


@dataclass(frozen=True, kw_only=True)
class TSDataLakeOptions(LedgerOptions, StorageOptions):
    sink_name: ClassVar[str] = "tsdatalake"

    path: str = option(
        aliases=("s3_prefix",),
        doc="Where tables live: an absolute local path, s3://bucket/prefix, "
        "abfs[s]://container@account.dfs.core.windows.net/prefix, az://container/prefix or "
        "gs://bucket/prefix (Quix's name: s3_prefix)",
    )
    table_name: str = option(
        # 1-255 letters, digits, '_', '-' or '.', not starting with '_' or '.' (readers skip
        # those folders)
        pattern=r"[A-Za-z0-9][A-Za-z0-9_.-]{0,254}",
        doc="Table: files go to <path>/<table_name>/<col>=<value>/...",
    )
    workspace_id: str = option(
        "", doc="Quix Cloud workspace id; recorded in the table's layout file, no path effect"
    )
    hive_columns: tuple[str, ...] = option(
        (),
        pattern=r"[^/=]+",
        doc="Comma-separated partition columns, outermost first; year, month, day and hour "
        "are derived from timestamp_column (UTC), other names are value columns (identity)",
    )
    timestamp_column: str = option(
        "ts_ms",
        doc="Column holding the record time: a timestamp, or an integer epoch in "
        "timestamp_unit; needed when hive_columns has year, month, day or hour",
    )
    timestamp_unit: TimestampUnit = option(
        "ms", doc="Unit of an integer timestamp_column (never guessed from the data)"
    )
    compression: Literal["snappy", "zstd", "gzip", "lz4", "brotli", "none"] = option(
        "snappy", doc="Parquet compression codec"
    )
    max_rows_per_file: int = option(
        0, minimum=0, doc="Start a new file in a partition after this many rows (0: no limit)"
    )
    catalog_url: str | None = option(
        None,
        doc="Iceberg REST catalog URI: the table is created or discovered there and every "
        "micro-batch's files are registered in one snapshot, exactly once (see the docs page)",
    )
    catalog_auth_token: str | None = option(None, secret=True, doc="Bearer token for catalog_url")
    catalog_timeout_seconds: float = option(
        60.0,
        positive=True,
        doc="With catalog_url: seconds to wait for the catalog to answer one request (and, at "
        "most 10 of them, to connect); a hung catalog fails the write or the commit",
    )
    auto_discover: bool = option(
        True,
        doc="With catalog_url: use the catalog's table when it exists, else create it; "
        "false: the table must exist (checked before any data moves)",
    )
    namespace: str = option("default", doc="With catalog_url: the catalog namespace")
    catalog_commit_max_attempts: int = option(
        10,
        minimum=1,
        doc="With catalog_url: catalog commits tried per micro-batch on a conflict or an "
        "unknown outcome (each one first checks whether the batch is registered already)",
    )
    catalog_keep_snapshots: int | None = option(
        None,
        minimum=1,
        doc="With catalog_url: expire snapshots beyond this many of the newest once there "
        "are twice as many (keeps commit time flat; the files stay, the lake is unchanged); "
        "the newest ledger entry of each streaming sink id is kept; default: keep all",
    )
    auto_create_bucket: bool = option(
        True, doc="Create the bucket or container when it does not exist (object stores)"
    )
    max_workers: int = option(
        10, minimum=1, doc="Accepted for Quix parity (the commit moves files 8 at a time)"
    )
    stream_timeout_ms: int | None = option(
        None,
        doc="Per-key silence threshold (ms): with on_stream_timeout, the callback fires "
        "once per key silent this long; None, 0 or negative disable it",
    )
    on_stream_timeout: str | None = option(
        None,
        doc="Import path 'package.module:function' of the silence callback; it runs in "
        "the driver process (see track() in the docs); a registered subclass may set the "
        "class attribute instead",
    )
    stream_timeout_state: Literal["memory", "persisted"] = option(
        "memory",
        doc="memory: a key quiet across a driver restart does not fire (Quix); persisted: "
        "last-seen times survive a restart and such a key still fires",
    )
    stream_timeout_max_keys: int = option(
        100_000,
        minimum=1,
        doc="Distinct keys a task reports per micro-batch for silence detection; more are "
        "counted (silence_keys_dropped) and not tracked",
    )
    stream_timeout_dir: str | None = option(
        None,
        doc="Local directory (on the driver host) where commits leave per-key last-seen "
        "times for the watcher; default: <tmp>/quixsinks-<uid>/silence; refused unless "
        "private to the user (see the Security page)",
    )

    def validate(self) -> None:
        super().validate()
        seen: set[str] = set()
        for name in self.hive_columns:
            if name in seen:
                raise OptionError(
                    f"tsdatalake: 'hive_columns' {','.join(self.hive_columns)!r}: each column once",
                    option="hive_columns",
                    value=",".join(self.hive_columns),
                )
            seen.add(name)

    @property
    def time_columns(self) -> tuple[str, ...]:
        return tuple(c for c in self.hive_columns if c in TIME_COLUMNS)

    @property
    def silence_enabled(self) -> bool:
        """The seed's rule: a positive timeout (the callback is checked where it runs)."""
        return self.stream_timeout_ms is not None and self.stream_timeout_ms > 0
